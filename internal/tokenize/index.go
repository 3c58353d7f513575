package tokenize

import "math/bits"

// index finds, at a position of a text, the longest held value that starts
// there. A one-hash bit filter over the values' first k bytes (k = 4, or
// the shortest value's length if less) turns most positions away at the cost
// of one load and one multiplication; at the others a radix tree of the
// values is walked, node by node, as far as the text agrees with some value.
// So a scan costs O(n) for ordinary text, a step or two a byte where held
// values occur; at worst the steps at a position are the number of held
// values that begin one another there, which the caller bounds with a budget
// (ErrCost). Values are only added, one insert each (O(len)), and the filter
// is rebuilt when the vault doubles.
type index struct {
	root  [256]edge // the root's edges, by first byte; to == 0: none
	nodes []node    // nodes[0] is the root, whose edges are in root
	vals  []string  // the values, to rebuild the filter
	k     int       // bytes the filter hashes; 0 while empty
	bits  []uint64
	shift uint // 32 - log2(len(bits) × 64)
}

type edge struct {
	label string // a non-empty part of a value
	to    int32
}

type node struct {
	edges []edge
	entry int32 // 1 + the id of the value ending here; 0: none
}

// edge returns n's edge starting with c, or nil.
func (x *index) edge(n int32, c byte) *edge {
	if n == 0 {
		if e := &x.root[c]; e.to != 0 {
			return e
		}
		return nil
	}
	es := x.nodes[n].edges
	for i := range es {
		if es[i].label[0] == c {
			return &es[i]
		}
	}
	return nil
}

// insert adds the value v, not empty and not yet held, as id.
func (x *index) insert(v string, id int32) {
	if x.nodes == nil {
		x.nodes = make([]node, 1)
	}
	n := int32(0)
	for rest := v; ; {
		if rest == "" {
			x.nodes[n].entry = id + 1
			break
		}
		e := x.edge(n, rest[0])
		if e == nil {
			x.nodes = append(x.nodes, node{entry: id + 1})
			e := edge{rest, int32(len(x.nodes) - 1)}
			if n == 0 {
				x.root[rest[0]] = e
			} else {
				x.nodes[n].edges = append(x.nodes[n].edges, e)
			}
			break
		}
		c := 0
		for c < len(e.label) && c < len(rest) && e.label[c] == rest[c] {
			c++
		}
		if c < len(e.label) { // split the edge at c
			x.nodes = append(x.nodes, node{edges: []edge{{e.label[c:], e.to}}})
			e.label, e.to = e.label[:c], int32(len(x.nodes)-1)
		}
		n, rest = e.to, rest[c:]
	}
	x.vals = append(x.vals, v)
	switch k := min(len(v), 4); {
	case x.k == 0 || k < x.k:
		x.k = k
		x.rebuild()
	case len(x.vals)*32 > len(x.bits)*64:
		x.rebuild()
	default:
		x.mark(v)
	}
}

// rebuild makes the filter anew, about 32 bits a value (at least 4096).
func (x *index) rebuild() {
	size := max(4096, 32*len(x.vals)) // bits
	lg := bits.Len(uint(size - 1))
	x.bits = make([]uint64, (1<<lg)/64)
	x.shift = uint(32 - lg)
	for _, v := range x.vals {
		x.mark(v)
	}
}

func (x *index) mark(v string) {
	b := x.hash(v, 0)
	x.bits[b>>6] |= 1 << (b & 63)
}

// hash is the filter bit of the k bytes at s[i:], which must be there.
func (x *index) hash(s string, i int) uint32 {
	var h uint32
	if x.k == 4 {
		h = uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
	} else {
		for _, c := range []byte(s[i : i+x.k]) {
			h = h<<8 | uint32(c)
		}
	}
	return (h * 0x9E3779B1) >> x.shift
}

// longest returns the end and id of the longest held value at s[i:] (end
// -1 if none), and the number of tree nodes it visited.
func (x *index) longest(s string, i int) (end int, id int32, steps int) {
	end = -1
	n, j := int32(0), i
	for j < len(s) {
		e := x.edge(n, s[j])
		steps++
		if e == nil || len(s)-j < len(e.label) || s[j:j+len(e.label)] != e.label {
			break
		}
		j += len(e.label)
		n = e.to
		if x.nodes[n].entry != 0 {
			end, id = j, x.nodes[n].entry-1
		}
	}
	return end, id, steps
}
