package layer

import (
	"slices"
	"strings"

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
)

// pairRenames turns each deleted patch and added patch of the same type
// whose contents are alike into one rename patch (from set, similarity
// in percent), exact matches first, then the most similar; it returns
// the patches in their order, the added patch's place taken by the
// rename and the deleted one dropped. Binary files and symlinks are
// renamed only when identical.
func pairRenames(ps []patch) []patch {
	var dels, adds []int
	for i, p := range ps {
		switch {
		case p.a != nil && p.b == nil && p.a.Type != "dir" && !p.modeOnly:
			dels = append(dels, i)
		case p.a == nil && p.b != nil && p.b.Type != "dir" && !p.modeOnly:
			adds = append(adds, i)
		}
	}
	if len(dels) == 0 || len(adds) == 0 {
		return ps
	}
	// A deleted path that is added again (a type change) is no rename.
	paths := map[string]int{}
	for _, p := range ps {
		paths[p.path]++
	}
	content := func(lines []string) string { return strings.Join(lines, "") }
	used := map[int]bool{}
	from := map[int]int{} // added index -> deleted index
	score := map[int]int{}
	byContent := map[string][]int{}
	for _, d := range dels {
		if paths[ps[d].path] > 1 {
			continue
		}
		k := ps[d].a.Type + "\x00" + content(ps[d].aText)
		byContent[k] = append(byContent[k], d)
	}
	for _, a := range adds {
		if paths[ps[a].path] > 1 {
			continue
		}
		k := ps[a].b.Type + "\x00" + content(ps[a].bText)
		for _, d := range byContent[k] {
			if !used[d] {
				used[d], from[a], score[a] = true, d, 100
				break
			}
		}
	}
	if len(dels)*len(adds) <= renameMaxPairs {
		type cand struct{ d, a, s int }
		var cs []cand
		for _, a := range adds {
			if _, done := from[a]; done || paths[ps[a].path] > 1 || ps[a].b.Type != "file" || ps[a].binary {
				continue
			}
			for _, d := range dels {
				if used[d] || paths[ps[d].path] > 1 || ps[d].a.Type != "file" || ps[d].binary {
					continue
				}
				if s := similarity(ps[d], ps[a]); s >= renameMinScore {
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
		return ps
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
	return out
}

// similarity estimates, in percent, how much of the larger of two files
// the other holds: the bytes of the lines a line diff keeps, over the
// larger size (git's estimate_similarity in diffcore-rename.c counts
// copied bytes over the larger size too, by hashed chunks rather than
// lines). Sizes alone rule out most pairs without a diff.
func similarity(del, add patch) int {
	big := max(del.aSize, add.bSize)
	if big == 0 {
		return 100
	}
	if min(del.aSize, add.bSize)*100 < big*renameMinScore || big > renameMaxSize {
		return 0
	}
	m := difflib.NewMatcherWithJunk(del.aText, add.bText, false, nil)
	var same int64
	for _, b := range m.GetMatchingBlocks() {
		for _, l := range del.aText[b.A : b.A+b.Size] {
			same += int64(len(l))
		}
	}
	return int(same * 100 / big)
}

// renamed is the patch of a rename from del's path to add's.
func renamed(del, add patch, score int) patch {
	p := add
	p.from, p.similarity = del.path, score
	p.a, p.aText, p.aSize = del.a, del.aText, del.aSize
	if score == 100 {
		p.hunks, p.ins, p.del, p.hasContent = nil, 0, 0, false
		p.binary = false
		return p
	}
	p.hunks, p.ins, p.del = unified(p.aText, p.bText)
	p.hasContent = len(p.hunks) > 0
	return p
}
