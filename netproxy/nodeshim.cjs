// corral: route Node's fetch and https through HTTPS_PROXY on Node
// versions that ignore NODE_USE_ENV_PROXY (before 22.21 and 24.5).
// CommonJS in the syntax of Node 12 (no ?., no ??, no top-level await),
// loaded with --require, which every Node version accepts in NODE_OPTIONS.
"use strict";
(function () {
  const V = process.versions.node.split(".").map(Number);
  const P = process.env.HTTPS_PROXY || process.env.https_proxy;
  const own = V[0] > 24 || (V[0] === 24 && V[1] >= 5) || (V[0] === 22 && V[1] >= 21);
  if (!P || own) return; // this Node proxies by itself: load nothing
  let u;
  try { u = new URL(P); } catch (e) { return; }
  // Loaded here, not at the top, so a Node that needs none of this
  // loads nothing.
  const net = require("net"), tls = require("tls"), https = require("https");
  const N = (process.env.NO_PROXY || process.env.no_proxy || "").split(",").map(s => s.trim().toLowerCase()).filter(Boolean);
  const direct = h => N.some(n => n === "*" || h === n || h.endsWith(n[0] === "." ? n : "." + n));
  function tunnel(host, port, cb) {
    const s = net.connect(+u.port || 80, u.hostname);
    const a = (host.includes(":") ? "[" + host + "]" : host) + ":" + port;
    let b = Buffer.alloc(0), done = false;
    const end = (e, x) => { if (!done) { done = true; s.removeListener("data", on); cb(e, x); } };
    const on = d => {
      b = Buffer.concat([b, d]);
      const i = b.indexOf("\r\n\r\n");
      if (i < 0) return;
      const l = b.subarray(0, b.indexOf("\r\n")).toString("latin1");
      if (!/^HTTP\/1\.[01] 200/.test(l)) { s.destroy(); return end(new Error("proxy refused CONNECT " + a + ": " + l)); }
      if (b.length > i + 4) s.unshift(b.subarray(i + 4));
      end(null, s);
    };
    s.on("data", on).once("error", e => end(e));
    s.once("connect", () => s.write("CONNECT " + a + " HTTP/1.1\r\nHost: " + a + "\r\n\r\n"));
  }
  function wrap(s, o, secure, cb) {
    if (!secure) return cb(null, s);
    const t = tls.connect(Object.assign({}, o, { socket: s, servername: o.servername || (net.isIP(o.hostname) ? undefined : o.hostname) }));
    let done = false;
    t.once("secureConnect", () => { if (!done) { done = true; cb(null, t); } });
    t.once("error", e => { if (!done) { done = true; cb(e); } });
  }
  // fetch (Node 18 on) loads Node's bundled undici, which makes its
  // global Agent, on its first call: swap the Agent then, so a node that
  // never fetches pays nothing. Node 12 and 16 have no fetch.
  const f = globalThis.fetch;
  if (typeof f === "function") globalThis.fetch = function fetch() {
    globalThis.fetch = f;
    try {
      f("data:,").catch(() => {});
      const K = Symbol.for("undici.globalDispatcher.1"), A = globalThis[K] && globalThis[K].constructor;
      if (A) globalThis[K] = new A({
        connect(o, cb) {
          const h = o.hostname.replace(/^\[|\]$/g, ""), s = o.protocol === "https:", port = +o.port || (s ? 443 : 80);
          const x = { hostname: h, servername: o.servername, ALPNProtocols: ["http/1.1"] };
          if (direct(h.toLowerCase())) return wrap(net.connect(port, h), x, s, cb);
          tunnel(h, port, (e, c) => e ? cb(e) : wrap(c, x, s, cb));
        },
      });
    } catch (e) {}
    return f.apply(this, arguments);
  };
  const g = new https.Agent({ keepAlive: true });
  g.createConnection = function (o, cb) {
    const h = o.host || o.hostname || "localhost";
    if (direct(h.toLowerCase())) return tls.connect(o);
    tunnel(h, o.port || 443, (e, c) => e ? cb(e) : cb(null, tls.connect(Object.assign({}, o, { socket: c, servername: o.servername || (net.isIP(h) ? undefined : h) }))));
  };
  https.globalAgent = g;
})();
