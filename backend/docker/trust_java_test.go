package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

// javaHomes are the JDKs the docker Java test may bind into its
// container, the first present is used: Debian's OpenJDK 17 (which .ci/run
// installs; with its configuration in /etc/java-17-openjdk), else Temurin
// 25; both link lib/security/cacerts to /etc/ssl/certs/java/cacerts.
var javaHomes = []string{"/usr/lib/jvm/java-17-openjdk-amd64", "/usr/lib/jvm/temurin-25-jdk-amd64"}

// fetchJavaDocker fetches its argument with java.net.http.HttpClient,
// sending the stand-in of GITHUB_TOKEN; it names no proxy and no trust
// store.
const fetchJavaDocker = `public class Fetch {
    public static void main(String[] args) throws Exception {
        var r = java.net.http.HttpClient.newHttpClient().send(
            java.net.http.HttpRequest.newBuilder(java.net.URI.create(args[0]))
                .header("Authorization", "Bearer " + System.getenv("GITHUB_TOKEN")).build(),
            java.net.http.HttpResponse.BodyHandlers.ofString());
        System.out.println("java: " + r.statusCode() + " " + r.body());
    }
}
`

// TestSecretsDockerJava: in an image with a Java trust store (the test
// image plus a placeholder at /etc/ssl/certs/java/cacerts), a JVM (the
// host's Temurin, bound read-only; its lib/security/cacerts links to that
// path) reaches a secret's host through the proxy (JAVA_TOOL_OPTIONS) and
// trusts corral's CA (the trust store bound over the placeholder); the
// server sees the real token.
func TestSecretsDockerJava(t *testing.T) {
	javaHome := ""
	for _, h := range javaHomes {
		if _, err := os.Stat(filepath.Join(h, "bin", "java")); err == nil {
			javaHome = h
			break
		}
	}
	if javaHome == "" {
		t.Skipf("no JDK at %v (apt-get install openjdk-17-jdk-headless; CI installs it)", javaHomes)
	}
	f := newSecretsFixture(t)
	ref := javaImage(t, f.cli, f.b.Settings().Image)
	st := f.b.Settings()
	st.Image = ref
	st.Binds = []sandbox.Bind{{Src: javaHome, ReadOnly: true}}
	// Debian's OpenJDK keeps its configuration (java.security) in /etc,
	// its conf/ directory linking there.
	if conf := "/etc/java-17-openjdk"; strings.Contains(javaHome, "java-17-openjdk") {
		st.Binds = append(st.Binds, sandbox.Bind{Src: conf, ReadOnly: true})
	}
	f.b = f.e.Backend(st)
	if err := os.WriteFile(filepath.Join(f.ws, "Fetch.java"), []byte(fetchJavaDocker), 0o644); err != nil {
		t.Fatal(err)
	}
	res, out := f.run("java", javaHome+"/bin/java Fetch.java https://api.allowed.test/java", withSecret, func(r *sandbox.Request) {
		r.Timeout = 3 * 60e9
		// The defaults are enough here: the container's memory limit is
		// a cgroup, not an address-space limit.
		r.Limits = sandbox.DefaultLimits
	})
	if res.ExitCode != 0 || !strings.Contains(out, "java: 200 hello api.allowed.test") || !strings.Contains(out, "Picked up JAVA_TOOL_OPTIONS") {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	if strings.Contains(out, realToken) {
		t.Errorf("the container saw the real value:\n%s", out)
	}
	// A JDK with a cacerts file of its own (in the workspace; the rest
	// links to the bound JDK): JAVA_TOOL_OPTIONS names corral's store as
	// the trust store, so it trusts corral's CA all the same.
	if _, err := os.Stat("/etc/ssl/certs/java/cacerts"); err != nil {
		t.Skipf("no Java trust store on this host to give the JDK as its own: %v (apt-get install ca-certificates-java; CI has it)", err)
	}
	own := testkit.OwnCacertsJDK(t, javaHome, filepath.Join(f.ws, "jdk"), "/etc/ssl/certs/java/cacerts")
	res, out = f.run("java", own+"/bin/java -XshowSettings:properties Fetch.java https://api.allowed.test/java-own", withSecret, func(r *sandbox.Request) {
		r.Timeout = 3 * 60e9
		r.Limits = sandbox.DefaultLimits
	})
	if res.ExitCode != 0 || !strings.Contains(out, "java: 200 hello api.allowed.test") || !strings.Contains(out, "java.home = "+own+"\n") ||
		!strings.Contains(out, "-Djavax.net.ssl.trustStore=/etc/ssl/certs/java/cacerts") {
		t.Fatalf("JDK with its own cacerts: exit %d:\n%s", res.ExitCode, out)
	}
	if !strings.Contains(f.seen(), "api.allowed.test auth=Bearer "+realToken) {
		t.Errorf("the server did not get the real token:\n%s", f.seen())
	}
}

// javaImage builds (once per base) base plus a placeholder Java trust
// store at /etc/ssl/certs/java/cacerts, which holds no certificate: a
// JVM that trusts corral's CA got it from corral's store.
func javaImage(t *testing.T, cli *client.Client, base string) string {
	t.Helper()
	ref := "corral-test-java:3-" + strings.ReplaceAll(strings.TrimPrefix(base, "corral-test:"), ":", "-")
	if _, err := cli.ImageInspect(context.Background(), ref); err == nil {
		return ref
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name, data string) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))})
		tw.Write([]byte(data))
	}
	// The JDKs' libraries need these besides libc (OpenJDK 17 also libstdc++
	// and libgcc_s), which the test image
	// lacks (their symlinks resolved; copied from the host).
	dockerfile := "FROM " + base + "\nCOPY cacerts /etc/ssl/certs/java/cacerts\n"
	for _, l := range []string{"libdl.so.2", "libpthread.so.0", "libm.so.6", "librt.so.1", "libz.so.1", "libstdc++.so.6", "libgcc_s.so.1"} {
		data, err := os.ReadFile(filepath.Join("/lib/x86_64-linux-gnu", l))
		if err != nil {
			t.Skipf("the JDK's library %s is not on this host: %v", l, err)
		}
		add(l, string(data))
		dockerfile += "COPY " + l + " /lib/x86_64-linux-gnu/" + l + "\n"
	}
	add("Dockerfile", dockerfile)
	add("cacerts", "not a trust store\n")
	tw.Close()
	dockertest.BuildImage(t, cli, ref, &buf)
	return ref
}
