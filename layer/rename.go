package layer

import (
	"slices"

	"github.com/pmezard/go-difflib/difflib"
)

// Rename detection for Diff, as git diff does it by default (diff.renames
// true since git 2.9; the similarity threshold of -M, 50%): a path the
// layer deleted and one it added are shown as one rename when their
// contents are alike. It changes only how a diff reads: Changes, Apply and
// Discard still see a deletion and an addition, which is what the layer
// holds (overlayfs records a renamed file as a whiteout and a new file).
const (
	// renameMinScore is the least similarity, in percent, that makes a
	// deleted and an added path a rename (git's -M default).
	renameMinScore = 50
	// renameMaxPairs bounds the inexact comparisons (each a line diff):
	// past deleted x added = renameMaxPairs only exact renames are found,
	// as git falls back when diff.renameLimit is exceeded.
	renameMaxPairs = 2500
	// renameMaxSize bounds the files compared inexactly, in bytes (a line
	// diff of two large files costs far more than the rest of a diff).
	renameMaxSize = 256 << 10
	// renameCacheSize bounds, in bytes, the texts kept between the
	// inexact comparisons.
	renameCacheSize = 16 << 20
)

// pairRenames turns each deleted patch and added patch of the same type
// whose contents are alike into one rename patch (from set, similarity
// in percent), exact matches first, then the most similar; it returns
// the patches in their order, the added patch's place taken by the
// rename and the deleted one dropped. Binary files and symlinks are
// renamed only when identical. Contents are compared by SHA-256 read in
// a stream (only between sides of one type and size), and read whole
// only for the inexact comparisons of files up to renameMaxSize.
func pairRenames(ps []patch) ([]patch, error) {
	var dels, adds []int
	for i, p := range ps {
		switch {
		case p.a != nil && p.b == nil && p.a.Type != "dir" && !p.modeOnly && !special(p.a):
			dels = append(dels, i)
		case p.a == nil && p.b != nil && p.b.Type != "dir" && !p.modeOnly && !special(p.b):
			adds = append(adds, i)
		}
	}
	if len(dels) == 0 || len(adds) == 0 {
		return ps, nil
	}
	// A deleted path that is added again (a type change) is no rename.
	paths := map[string]int{}
	for _, p := range ps {
		paths[p.path]++
	}
	type shape struct {
		typ  string
		size int64
	}
	delShapes := map[shape]bool{}
	for _, d := range dels {
		delShapes[shape{ps[d].a.Type, ps[d].aSize}] = true
	}
	addShapes := map[shape]bool{}
	for _, a := range adds {
		addShapes[shape{ps[a].b.Type, ps[a].bSize}] = true
	}
	// key identifies a side's content: a symlink's target, a file's hash
	// ("" when no side of the other kind has its type and size).
	key := func(root, rel string, s *Side, size int64, others map[shape]bool) (string, error) {
		if !others[shape{s.Type, size}] {
			return "", nil
		}
		if s.Type == "symlink" {
			return "l\x00" + s.Target, nil
		}
		t, err := openTree(root)
		if err != nil {
			return "", err
		}
		defer t.close()
		h, err := t.hashFile(rel)
		return "f\x00" + h, err
	}
	used := map[int]bool{}
	from := map[int]int{} // added index -> deleted index
	score := map[int]int{}
	byContent := map[string][]int{}
	for _, d := range dels {
		if paths[ps[d].path] > 1 {
			continue
		}
		k, err := key(ps[d].aRoot, ps[d].path, ps[d].a, ps[d].aSize, addShapes)
		if err != nil {
			return nil, err
		}
		if k != "" {
			byContent[k] = append(byContent[k], d)
		}
	}
	for _, a := range adds {
		if paths[ps[a].path] > 1 {
			continue
		}
		k, err := key(ps[a].bRoot, ps[a].path, ps[a].b, ps[a].bSize, delShapes)
		if err != nil {
			return nil, err
		}
		for _, d := range byContent[k] {
			if k != "" && !used[d] {
				used[d], from[a], score[a] = true, d, 100
				break
			}
		}
	}
	if len(dels)*len(adds) <= renameMaxPairs {
		type cand struct{ d, a, s int }
		var cs []cand
		// Texts (each at most renameMaxSize) are kept for the next pair
		// up to renameCacheSize in all, and read again past it.
		texts := map[int][]string{}
		var cached int64
		text := func(i int) ([]string, error) {
			if t, ok := texts[i]; ok {
				return t, nil
			}
			p, size := ps[i], ps[i].aSize
			var t []string
			var err error
			if p.b == nil {
				t, err = sideText(p.aRoot, p.path, p.a)
			} else {
				t, err = sideText(p.bRoot, p.path, p.b)
				size = p.bSize
			}
			if err == nil && cached+size <= renameCacheSize {
				texts[i], cached = t, cached+size
			}
			return t, err
		}
		for _, a := range adds {
			if _, done := from[a]; done || paths[ps[a].path] > 1 || ps[a].b.Type != "file" || ps[a].binary {
				continue
			}
			for _, d := range dels {
				if used[d] || paths[ps[d].path] > 1 || ps[d].a.Type != "file" || ps[d].binary {
					continue
				}
				s, err := similarity(ps[d], ps[a], func() ([]string, []string, error) {
					x, err := text(d)
					if err != nil {
						return nil, nil, err
					}
					y, err := text(a)
					return x, y, err
				})
				if err != nil {
					return nil, err
				}
				if s >= renameMinScore {
					cs = append(cs, cand{d, a, s})
				}
			}
		}
		// Most similar first; ties in path order, so the result is stable.
		slices.SortStableFunc(cs, func(x, y cand) int { return y.s - x.s })
		for _, c := range cs {
			if _, done := from[c.a]; done || used[c.d] {
				continue
			}
			used[c.d], from[c.a], score[c.a] = true, c.d, c.s
		}
	}
	if len(from) == 0 {
		return ps, nil
	}
	out := make([]patch, 0, len(ps)-len(from))
	for i, p := range ps {
		if used[i] {
			continue
		}
		if d, ok := from[i]; ok {
			p = renamed(ps[d], p, score[i])
		}
		out = append(out, p)
	}
	return out, nil
}

// similarity estimates, in percent, how much of the larger of two files
// the other holds: the bytes of the lines a line diff keeps, over the
// larger size (git's estimate_similarity in diffcore-rename.c counts
// copied bytes over the larger size too, by hashed chunks rather than
// lines). Sizes alone rule out most pairs before texts reads the lines.
func similarity(del, add patch, texts func() ([]string, []string, error)) (int, error) {
	big := max(del.aSize, add.bSize)
	if big == 0 {
		return 100, nil
	}
	if min(del.aSize, add.bSize)*100 < big*renameMinScore || big > renameMaxSize {
		return 0, nil
	}
	a, b, err := texts()
	if err != nil {
		return 0, err
	}
	m := difflib.NewMatcherWithJunk(a, b, false, nil)
	var same int64
	for _, blk := range m.GetMatchingBlocks() {
		for _, l := range a[blk.A : blk.A+blk.Size] {
			same += int64(len(l))
		}
	}
	return int(same * 100 / big), nil
}

// renamed is the patch of a rename from del's path to add's; render
// makes its hunks.
func renamed(del, add patch, score int) patch {
	p := add
	p.from, p.similarity = del.path, score
	p.a, p.aRoot, p.aSize = del.a, del.aRoot, del.aSize
	if score == 100 {
		p.binary = false
	}
	return p
}
