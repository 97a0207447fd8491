package bwrap

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/testcert"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// fetchJava fetches its first argument with java.net.http.HttpClient and
// its second with HttpsURLConnection, each sending the stand-in of
// GITHUB_TOKEN in Authorization. Neither names a proxy or a trust store:
// both come from what corral sets up (JAVA_TOOL_OPTIONS, the trust store
// bound over the system's).
const fetchJava = `import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Fetch {
    public static void main(String[] args) throws Exception {
        String auth = "Bearer " + System.getenv("GITHUB_TOKEN");
        HttpResponse<String> r = HttpClient.newHttpClient().send(
            HttpRequest.newBuilder(URI.create(args[0])).header("Authorization", auth).build(),
            HttpResponse.BodyHandlers.ofString());
        System.out.println("httpclient: " + r.statusCode() + " " + r.body());
        if (args.length < 2) return;
        javax.net.ssl.HttpsURLConnection c = (javax.net.ssl.HttpsURLConnection) URI.create(args[1]).toURL().openConnection();
        c.setRequestProperty("Authorization", auth);
        System.out.println("urlconnection: " + c.getResponseCode() + " " + new String(c.getInputStream().readAllBytes()));
    }
}
`

// javaHomes are the JDKs the test runs, where installed: Debian's 17 (its
// cacerts a symlink to /etc/ssl/certs/java/cacerts) and a Temurin 25.
var javaHomes = []string{"/usr/lib/jvm/java-17-openjdk-amd64", "/usr/lib/jvm/temurin-25-jdk-amd64"}

// TestSecretsJava runs a Java program (the single-file source launcher,
// no javac step) in a bwrap sandbox of the allowlist profile with a
// secret: the JVM finds corral's proxy through JAVA_TOOL_OPTIONS and
// trusts corral's CA through the trust store bound over the system's;
// the server sees the real token. With a trust store that lacks corral's
// CA the handshake fails, so the trust comes from corral's store.
func TestSecretsJava(t *testing.T) {
	e := newEnv(t)
	if len(secrets.HostJavaStores()) == 0 {
		t.Skipf("no Java trust store on this host (%v; apt-get install ca-certificates-java)", secrets.JavaTrustStores)
	}
	var homes []string
	for _, h := range javaHomes {
		if _, err := os.Stat(filepath.Join(h, "bin", "java")); err == nil {
			homes = append(homes, h)
		}
	}
	if len(homes) == 0 {
		t.Skipf("no JDK at %v (apt-get install openjdk-17-jdk-headless)", javaHomes)
	}
	w := newSecretsWorld(t, e)
	if err := os.WriteFile(filepath.Join(e.work, "Fetch.java"), []byte(fetchJava), 0o644); err != nil {
		t.Fatal(err)
	}
	// A trust store of the host's bundle and another CA: Java given it
	// must refuse corral's certificates.
	_, system := secrets.HostBundles()
	_, otherCA := testcert.New(t, "other-ca.test")
	foreign, err := secrets.TrustStore(system, otherCA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.work, "foreign.p12"), foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	secretsOn := func(r *sandbox.Request) {
		allowlist(r)
		r.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.allowed.test"}}}
		r.Timeout = 120e9
		// The default memory_mb: where it is RLIMIT_DATA (an
		// unprivileged caller here) the JVM is told it
		// (withJavaMaxRAM) ahead of the secrets' options. The source
		// launcher compiles the program first: a few CPU seconds.
		r.Limits.CPUSeconds = 60
	}
	for _, home := range homes {
		t.Run(filepath.Base(home), func(t *testing.T) {
			java := filepath.Join(home, "bin", "java")
			m := w.mark()
			o := e.sh(java+` Fetch.java https://api.allowed.test/java-client https://api.allowed.test/java-urlconnection`, secretsOn)
			mustContain(t, o, "httpclient: 200 hello host=api.allowed.test path=/java-client",
				"urlconnection: 200 hello host=api.allowed.test path=/java-urlconnection")
			if !pickedUpProxy.MatchString(o.stdout + o.stderr) {
				t.Errorf("the JVM did not pick up the proxy options first (after corral's -XX:MaxRAM where memory is per process)\n%s", o)
			}
			mustNotContain(t, o, realGH)
			seen := w.seenSince(m)
			for _, p := range []string{"/java-client", "/java-urlconnection"} {
				if !strings.Contains(seen, "api.allowed.test GET "+p+" auth=Bearer "+realGH) {
					t.Errorf("the server did not get the real token at %s:\n%s\nsandbox:\n%s", p, seen, o)
				}
			}
			// A JDK with a cacerts file of its own (as an unpacked
			// tarball has; here the host's store, without corral's CA):
			// JAVA_TOOL_OPTIONS names corral's store as the trust store.
			own := testkit.OwnCacertsJDK(t, home, filepath.Join(e.work, "jdk-"+filepath.Base(home)), secrets.HostJavaStores()[0])
			m = w.mark()
			o = e.sh(own+`/bin/java -XshowSettings:properties Fetch.java https://api.allowed.test/java-own-cacerts`, secretsOn)
			mustContain(t, o, "httpclient: 200 hello host=api.allowed.test path=/java-own-cacerts", "java.home = "+filepath.Dir(filepath.Dir(own+"/bin/java")),
				"-Djavax.net.ssl.trustStore="+secrets.HostJavaStores()[0])
			if !strings.Contains(w.seenSince(m), "auth=Bearer "+realGH) {
				t.Errorf("the JDK with its own cacerts: the server did not get the real token:\n%s", w.seenSince(m))
			}
			// A trust store named on the command line comes after
			// JAVA_TOOL_OPTIONS and wins: corral's CA is not in it.
			o = e.sh(java+` -Djavax.net.ssl.trustStore=foreign.p12 -Djavax.net.ssl.trustStorePassword=changeit Fetch.java https://api.allowed.test/java-foreign`, secretsOn)
			if o.res.ExitCode == 0 || !strings.Contains(o.stderr, "PKIX path building failed") {
				t.Errorf("with a trust store lacking corral's CA the fetch did not fail at the handshake:\n%s", o)
			}
		})
	}
}

// pickedUpProxy matches the JVM's note of the JAVA_TOOL_OPTIONS it read
// under secrets: corral's -XX:MaxRAM first where memory_mb is RLIMIT_DATA
// (withJavaMaxRAM), then the proxy's properties.
var pickedUpProxy = regexp.MustCompile(`Picked up JAVA_TOOL_OPTIONS: (-XX:MaxRAM=[0-9]+m )?-Dhttp\.proxyHost=127\.0\.0\.1`)
