package layer

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLongPaths: a session nests directories past PATH_MAX (4096 bytes):
// diff shows the file, apply applies one chain, discard drops the other.
func TestLongPaths(t *testing.T) {
	l := project(t)
	seg := strings.Repeat("d", 200)
	// bash, not sh: dash's cd makes the whole path, which fails past
	// PATH_MAX; bash's falls back to the relative name.
	inOverlay(t, l, `bash -ec 'for top in long1 long2; do (mkdir $top; cd $top; for i in $(seq 25); do mkdir `+seg+`; cd `+seg+`; done; echo deep > file); done'`)
	deep := strings.Repeat(seg+"/", 25) + "file"
	if len("long1/"+deep) <= unix.PathMax {
		t.Fatalf("the path is only %d bytes", len(deep))
	}
	cs, err := Changes(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Diff(&b, cs, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, top := range []string{"long1", "long2"} {
		if !strings.Contains(b.String(), "+++ b/"+top+"/"+deep+"\n@@ -0,0 +1 @@\n+deep\n") {
			t.Errorf("diff lacks %s/.../file:\n%.2000s", top, b.String())
		}
	}
	b.Reset()
	if err := Diff(&b, cs, DiffOptions{Stat: true}); err != nil || !strings.Contains(b.String(), " 2 files changed, 2 insertions(+)") {
		t.Errorf("stat: %v\n%.300s", err, b.String())
	}
	if _, err := Apply(l, []string{"long1"}, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	lo, err := openTree(l.Lower)
	if err != nil {
		t.Fatal(err)
	}
	defer lo.close()
	if got, err := lo.readFile("long1/" + deep); err != nil || string(got) != "deep\n" {
		t.Fatalf("applied: %q %v", got, err)
	}
	if err := Discard(l, nil); err != nil {
		t.Fatal(err)
	}
	if got := paths(t, l); got != nil {
		t.Errorf("left after discard: %q", got[:min(len(got), 3)])
	}
	inOverlay(t, l, `test ! -e long2; test -d long1`)
	if n, err := lo.lstat("long2"); n != nil || err != nil {
		t.Errorf("long2 reached the host: %v %v", n, err)
	}
}
