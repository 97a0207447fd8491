package lazyre

import (
	"sync"
	"testing"
)

func TestCompiledOnceAtFirstUse(t *testing.T) {
	r := New(`^a(b+)$`)
	if r.re != nil {
		t.Fatal("New compiled the expression")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !r.MatchString("abb") || r.MatchString("ac") {
				t.Error("MatchString disagrees with regexp")
			}
		}()
	}
	wg.Wait()
	first := r.Get()
	if got := r.FindStringSubmatch("abbb"); len(got) != 2 || got[1] != "bbb" {
		t.Errorf("FindStringSubmatch = %q", got)
	}
	if r.Get() != first {
		t.Error("compiled twice")
	}
}

func TestBadExpressionPanicsAtFirstUse(t *testing.T) {
	r := New(`(`) // no panic here
	defer func() {
		if recover() == nil {
			t.Error("a bad expression did not panic at first use")
		}
	}()
	r.MatchString("x")
}
