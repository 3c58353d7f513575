// Package catalog is what the code in the sandbox sees of the upstream
// servers' tools: the catalog of every tool and its BM25F search
// (catalog.go), the closest names to one mistyped (catalog.go), the Python
// module name of each server (alias.go), and the shape of a tool's result
// from its output schema (shape.go).
package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/bridge-mcp/bridge/internal/suggest"
)

// Tool is one tool of one upstream server.
type Tool struct {
	Server       string
	Name         string
	Title        string
	Description  string
	InputSchema  json.RawMessage // may be nil
	OutputSchema json.RawMessage // may be nil
	Annotations  json.RawMessage // may be nil
}

// SearchHit is one result of [Catalog.Search].
type SearchHit struct {
	Tool  Tool
	Score float64
	// Params are the property names of [Tool.InputSchema], in schema order;
	// nil when it has none or is not a JSON object.
	Params []string
}

// Search limits.
const (
	searchDefaultLimit = 5
	searchMaxLimit     = 50
	// searchMaxTerms bounds the words of a query that count; the rest are ignored.
	searchMaxTerms = 64
)

// BM25 parameters.
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// prefixFactor scales the score a query term earns through prefix expansion
// (see Search); maxPrefixTerms caps how many index terms one query term
// expands to.
const (
	prefixFactor   = 0.5
	maxPrefixTerms = 64
)

// The fields of a tool that Search looks at, and their weights.
const (
	fieldName      = iota // tool name
	fieldTitle            // title
	fieldServer           // server name
	fieldDesc             // description
	fieldParamName        // InputSchema property names
	fieldParamDesc        // InputSchema property descriptions
	numFields
)

var fieldWeights = [numFields]float64{
	fieldName:      3,
	fieldTitle:     2,
	fieldServer:    1.5,
	fieldDesc:      1,
	fieldParamName: 1.5,
	fieldParamDesc: 0.5,
}

// Catalog is an immutable, searchable set of tools. Safe for concurrent use.
// A nil *[Catalog] is empty.
//
// The [Tool] values it returns share their json.RawMessage fields with
// the catalog: callers must not modify them.
type Catalog struct {
	tools    []Tool     // in input order, duplicates dropped
	params   [][]string // per tool, its InputSchema property names
	byServer map[string][]Tool
	byName   map[toolKey]int
	// exact maps a lower-cased tool name, and a lower-cased "server.tool",
	// to the tools it names.
	exact map[string][]int32

	terms    map[string]int32 // term -> term id
	vocab    []string         // all terms, sorted, for prefix expansion
	idf      []float64        // per term id
	postings [][]posting      // per term id, by ascending doc
}

type toolKey struct{ server, name string }

// posting says that a term occurs in a tool (doc, an index into
// [Catalog].tools); sat is the term's saturated BM25F term frequency there,
// tf/(k1+tf), which does not depend on the query.
type posting struct {
	doc int32
	sat float64
}

// New indexes tools. It keeps their order per server; a tool whose
// server and name repeat an earlier one's is dropped.
//
// Search scores tools with BM25F (Robertson & Zaragoza's "simple BM25F"),
// over six fields of a tool, weighted: its name 3, title 2, server name
// 1.5, description 1, and, from InputSchema's top-level "properties", the
// parameter names 1.5 and their descriptions 0.5. A term's frequency in a
// tool is the sum over the fields of the field weight times the term's
// count in the field, each count normalised by the field's length against
// that field's average length (b = 0.75); the sum is then saturated with
// k1 = 1.2 and multiplied by the term's IDF, ln(1 + (N-df+0.5)/(df+0.5)),
// df counting the tools that have the term in any field. Every field is
// tokenised alike (see appendTokens).
func New(tools []Tool) *Catalog {
	c := &Catalog{
		byServer: make(map[string][]Tool),
		byName:   make(map[toolKey]int, len(tools)),
		exact:    make(map[string][]int32, 2*len(tools)),
		terms:    make(map[string]int32),
	}
	ix := indexer{scratch: make(map[int32]int)}
	for _, t := range tools {
		if !c.addTool(t) {
			continue
		}
		names, descs := schemaProperties(t.InputSchema)
		c.params = append(c.params, names)
		ix.tokenize(t, names, descs)
		ix.count(c)
	}
	c.index(&ix)
	slices.Sort(c.vocab) // term ids stay as assigned in c.terms
	return c
}

// addTool adds t, as New builds c, to the tools, by server and by name,
// and to the exact names it answers to. It is false, and adds nothing,
// when t's server and name repeat an earlier tool's.
func (c *Catalog) addTool(t Tool) bool {
	key := toolKey{t.Server, t.Name}
	if _, dup := c.byName[key]; dup {
		return false
	}
	doc := int32(len(c.tools))
	c.byName[key] = int(doc)
	c.tools = append(c.tools, t)
	c.byServer[t.Server] = append(c.byServer[t.Server], t)
	for _, k := range [...]string{strings.ToLower(t.Name), strings.ToLower(t.Server + "." + t.Name)} {
		if ids := c.exact[k]; len(ids) == 0 || ids[len(ids)-1] != doc {
			c.exact[k] = append(ids, doc)
		}
	}
	return true
}

// termCounts is one term's count in each field of one tool.
type termCounts struct {
	term   int32
	counts [numFields]uint16
}

// docStats is what New counts of one tool: its fields' lengths, in
// tokens, and the count of each of its terms.
type docStats struct {
	lens  [numFields]int
	terms []termCounts
}

// indexer is what New gathers, one tool after another, to score the
// terms once it has seen every tool.
type indexer struct {
	docs    []docStats
	df      []int               // per term id, the tools that have it
	fields  [numFields][]string // the tokens of the tool being counted
	scratch map[int32]int       // term id -> index into the tool's terms
	sumLens [numFields]float64  // per field, the sum of the tools' lengths
}

// tokenize sets ix.fields to the tokens of t's fields, with names and
// descs the names and descriptions of its parameters.
func (ix *indexer) tokenize(t Tool, names, descs []string) {
	for f := range ix.fields {
		ix.fields[f] = ix.fields[f][:0]
	}
	ix.fields[fieldName] = appendTokens(ix.fields[fieldName], t.Name)
	ix.fields[fieldTitle] = appendTokens(ix.fields[fieldTitle], t.Title)
	ix.fields[fieldServer] = appendTokens(ix.fields[fieldServer], t.Server)
	ix.fields[fieldDesc] = appendTokens(ix.fields[fieldDesc], t.Description)
	for _, n := range names {
		ix.fields[fieldParamName] = appendTokens(ix.fields[fieldParamName], n)
	}
	for _, d := range descs {
		ix.fields[fieldParamDesc] = appendTokens(ix.fields[fieldParamDesc], d)
	}
}

// count counts the tokens in ix.fields as the next tool's, giving each
// term c has not seen yet the next term id.
func (ix *indexer) count(c *Catalog) {
	var ds docStats
	clear(ix.scratch)
	for f, toks := range ix.fields {
		ds.lens[f] = len(toks)
		ix.sumLens[f] += float64(len(toks))
		for _, tok := range toks {
			id, ok := c.terms[tok]
			if !ok {
				id = int32(len(c.vocab))
				c.terms[tok] = id
				c.vocab = append(c.vocab, tok)
				ix.df = append(ix.df, 0)
			}
			i, ok := ix.scratch[id]
			if !ok {
				i = len(ds.terms)
				ix.scratch[id] = i
				ds.terms = append(ds.terms, termCounts{term: id})
				ix.df[id]++
			}
			if ds.terms[i].counts[f] < math.MaxUint16 {
				ds.terms[i].counts[f]++
			}
		}
	}
	ix.docs = append(ix.docs, ds)
}

// index sets each term's IDF and its postings, with their saturated
// BM25F term frequencies, from what ix counted of every tool.
func (c *Catalog) index(ix *indexer) {
	n := float64(len(ix.docs))
	var avgLens [numFields]float64
	for f := range avgLens {
		if n > 0 {
			avgLens[f] = ix.sumLens[f] / n
		}
	}
	c.idf = make([]float64, len(c.vocab))
	for id, d := range ix.df {
		c.idf[id] = math.Log(1 + (n-float64(d)+0.5)/(float64(d)+0.5))
	}
	c.postings = make([][]posting, len(c.vocab))
	for id, d := range ix.df {
		c.postings[id] = make([]posting, 0, d)
	}
	for doc, ds := range ix.docs {
		var norm [numFields]float64
		for f := range norm {
			if avgLens[f] > 0 {
				norm[f] = fieldWeights[f] / (1 - bm25B + bm25B*float64(ds.lens[f])/avgLens[f])
			}
		}
		for _, tc := range ds.terms {
			tf := 0.0
			for f, cnt := range tc.counts {
				tf += float64(cnt) * norm[f]
			}
			c.postings[tc.term] = append(c.postings[tc.term], posting{doc: int32(doc), sat: tf / (bm25K1 + tf)})
		}
	}
}

// Tools returns the tools of server in input order, or nil if it has none.
func (c *Catalog) Tools(server string) []Tool {
	if c == nil {
		return nil
	}
	return slices.Clone(c.byServer[server])
}

// Lookup returns the tool of server named tool.
func (c *Catalog) Lookup(server, tool string) (Tool, bool) {
	if c == nil {
		return Tool{}, false
	}
	i, ok := c.byName[toolKey{server, tool}]
	if !ok {
		return Tool{}, false
	}
	return c.tools[i], true
}

// Len returns the number of tools.
func (c *Catalog) Len() int {
	if c == nil {
		return 0
	}
	return len(c.tools)
}

// Search returns the tools that best match query, best first: at most limit
// (5 when limit <= 0, never more than 50), nil when none matches or query has
// no terms (it is empty or holds only stop words).
//
// The query is tokenised as the tools are (see New and appendTokens)
// and each distinct term counts once. A term that is in no tool expands
// to the indexed terms it is a prefix of, if it has at least 3 letters
// ("dir" finds "directory"): a tool then earns, at half weight, the best
// score of those terms.
//
// A query equal to a tool's name, or to "server.tool", ignoring case and
// surrounding space, puts that tool first (several tools, when servers share
// the name): its Score is its own BM25F score plus the best score of the
// other hits. Ties are broken by server, then tool name.
func (c *Catalog) Search(query string, limit int) []SearchHit {
	if c == nil {
		return nil
	}
	if limit <= 0 {
		limit = searchDefaultLimit
	}
	limit = min(limit, searchMaxLimit)
	query = strings.TrimSpace(query)
	var exact []int32
	if query != "" {
		exact = c.exact[strings.ToLower(query)]
	}
	qterms := appendTokens(nil, query)
	if len(qterms) == 0 && len(exact) == 0 {
		return nil
	}
	if len(qterms) > searchMaxTerms {
		qterms = qterms[:searchMaxTerms]
	}

	scores := c.scores(qterms)
	for _, doc := range exact {
		scores[doc] = -1 - scores[doc] // marks it, keeping its score
	}
	hits := c.topHits(scores, limit)
	if len(hits) == 0 {
		return nil
	}
	out := make([]SearchHit, len(hits))
	for i, h := range hits {
		out[i] = SearchHit{Tool: c.tools[h.doc], Score: h.score, Params: slices.Clone(c.params[h.doc])}
	}
	return out
}

// scores is each tool's BM25F score for the query terms qterms, each
// distinct term counted once. A term in no tool, of at least 3 letters,
// counts at prefixFactor through the terms it is a prefix of
// (prefixScores).
func (c *Catalog) scores(qterms []string) []float64 {
	scores := make([]float64, len(c.tools))
	var best map[int32]float64
	seen := make(map[string]bool, len(qterms))
	for _, t := range qterms {
		if seen[t] {
			continue
		}
		seen[t] = true
		if id, ok := c.terms[t]; ok {
			idf := c.idf[id]
			for _, p := range c.postings[id] {
				scores[p.doc] += idf * p.sat
			}
			continue
		}
		if utf8.RuneCountInString(t) < 3 {
			continue
		}
		// One map for every prefix of the query, made at the first.
		if best == nil {
			best = make(map[int32]float64)
		} else {
			clear(best)
		}
		c.prefixScores(t, best)
		for doc, s := range best {
			scores[doc] += prefixFactor * s
		}
	}
	return scores
}

// prefixScores sets best, per tool, to the best score of the indexed
// terms that begin with prefix (the first maxPrefixTerms of them).
func (c *Catalog) prefixScores(prefix string, best map[int32]float64) {
	expanded := 0
	for j := sort.SearchStrings(c.vocab, prefix); j < len(c.vocab) && strings.HasPrefix(c.vocab[j], prefix) && expanded < maxPrefixTerms; j++ {
		id := c.terms[c.vocab[j]]
		idf := c.idf[id]
		for _, p := range c.postings[id] {
			if s := idf * p.sat; s > best[p.doc] {
				best[p.doc] = s
			}
		}
		expanded++
	}
}

// hit is a tool Search may return: doc, an index into [Catalog].tools,
// whether the query named it exactly, and its score.
type hit struct {
	doc   int32
	exact bool
	score float64
}

// better says whether a goes before b: a tool the query named before one
// it did not, then the higher score, then by server and tool name.
func (c *Catalog) better(a, b hit) bool {
	if a.exact != b.exact {
		return a.exact
	}
	if a.score != b.score {
		return a.score > b.score
	}
	ta, tb := &c.tools[a.doc], &c.tools[b.doc]
	if ta.Server != tb.Server {
		return ta.Server < tb.Server
	}
	return ta.Name < tb.Name
}

// topHits returns the best limit hits of scores, best first, none of a tool
// that scored 0. A negative score, -1 - s, marks a tool the query named
// exactly: its hit scores s plus the best score of the others.
func (c *Catalog) topHits(scores []float64, limit int) []hit {
	var top float64
	for _, s := range scores {
		top = max(top, s)
	}
	// Keep the best limit hits in a sorted slice.
	hits := make([]hit, 0, limit+1)
	for doc, s := range scores {
		var h hit
		switch {
		case s > 0:
			h = hit{doc: int32(doc), score: s}
		case s < 0:
			h = hit{doc: int32(doc), exact: true, score: -1 - s + top}
		default:
			continue
		}
		if len(hits) == limit && !c.better(h, hits[limit-1]) {
			continue
		}
		i := sort.Search(len(hits), func(i int) bool { return c.better(h, hits[i]) })
		hits = slices.Insert(hits, i, h)
		if len(hits) > limit {
			hits = hits[:limit]
		}
	}
	return hits
}

// schemaProperties returns the names of the properties of a JSON schema, in
// the order the schema lists them, and their descriptions (those that are
// strings). It returns nils if the schema is not a JSON object or is
// malformed. A repeated "properties" key or property name counts once, the
// first time.
func schemaProperties(schema json.RawMessage) (names, descs []string) {
	if len(schema) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(schema))
	if !openObject(dec) {
		return nil, nil
	}
	seenProps := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil
		}
		if key, _ := tok.(string); key != "properties" || seenProps {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil, nil
			}
			continue
		}
		seenProps = true
		if !openObject(dec) {
			return nil, nil
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, nil
			}
			name, _ := tok.(string)
			// A property that is not an object (a boolean schema) leaves
			// a type error but is read whole.
			var prop struct {
				Description json.RawMessage `json:"description"`
			}
			if err := dec.Decode(&prop); err != nil {
				var typeErr *json.UnmarshalTypeError
				if !errors.As(err, &typeErr) {
					return nil, nil
				}
			}
			if slices.Contains(names, name) {
				continue
			}
			names = append(names, name)
			var d string
			if len(prop.Description) > 0 && prop.Description[0] == '"' && json.Unmarshal(prop.Description, &d) == nil && d != "" {
				descs = append(descs, d)
			}
		}
		if _, err := dec.Token(); err != nil { // the closing brace
			return nil, nil
		}
	}
	return names, descs
}

// openObject reads the opening brace of an object.
func openObject(dec *json.Decoder) bool {
	tok, err := dec.Token()
	return err == nil && tok == json.Delim('{')
}

// stopWords are dropped from tool texts and queries.
var stopWords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true,
	"be": true, "but": true, "by": true, "can": true, "do": true, "does": true,
	"for": true, "from": true, "has": true, "have": true, "how": true, "i": true,
	"if": true, "in": true, "into": true, "is": true, "it": true, "its": true,
	"me": true, "my": true, "of": true, "on": true, "or": true, "our": true,
	"so": true, "than": true, "that": true, "the": true, "their": true,
	"them": true, "then": true, "there": true, "these": true, "they": true,
	"this": true, "those": true, "to": true, "was": true, "we": true,
	"were": true, "what": true, "when": true, "where": true, "which": true,
	"will": true, "with": true, "you": true, "your": true,
}

// appendTokens appends the search terms of s to dst: s is cut into runs of
// Unicode letters and digits, runs are split at camelCase boundaries
// ("dryRun", "HTTPServer", "base64Encode"), lower-cased, stop words dropped
// and the rest stemmed (see stem).
func appendTokens(dst []string, s string) []string {
	start := -1 // start of the current run, or -1
	for i, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			dst = appendCamelParts(dst, s[start:i])
			start = -1
		}
	}
	if start >= 0 {
		dst = appendCamelParts(dst, s[start:])
	}
	return dst
}

// appendCamelParts appends the terms of a run of letters and digits.
func appendCamelParts(dst []string, run string) []string {
	start := 0
	var prev rune = -1
	for i, r := range run {
		if prev >= 0 && unicode.IsUpper(r) {
			boundary := unicode.IsLower(prev) || unicode.IsDigit(prev)
			if !boundary && unicode.IsUpper(prev) {
				// An acronym ends before an upper-case letter that starts
				// a lower-case word: "HTTPServer" -> "HTTP", "Server".
				next, _ := utf8.DecodeRuneInString(run[i+utf8.RuneLen(r):])
				boundary = unicode.IsLower(next)
			}
			if boundary {
				dst = appendTerm(dst, run[start:i])
				start = i
			}
		}
		prev = r
	}
	return appendTerm(dst, run[start:])
}

// appendTerm appends one word as a term, unless it is a stop word.
func appendTerm(dst []string, word string) []string {
	w := strings.ToLower(word)
	if w == "" || stopWords[w] {
		return dst
	}
	return append(dst, stem(w))
}

// stem is a light English stemmer for lower-case ASCII words; it leaves
// words of 3 bytes or less and other words alone. It strips, in turn:
//
//   - a plural: "-ies" becomes "-y" ("entities" -> "entity"), else a final
//     "s" goes unless the word ends in "ss", "us" or "is";
//   - "-ing" or "-ed" when at least 3 letters with a vowel remain, then
//     undoubles a final consonant other than l, s or z if 4 or more letters
//     remain ("running" -> "run", "stopped" -> "stop", but "added" -> "add");
//   - a final "e" when 3 or more letters remain.
//
// The result need not be a word, but inflections meet: "write", "writes"
// and "writing" give "writ"; "file" and "files" give "fil"; "boxes" and
// "box" give "box".
func stem(w string) string {
	if len(w) <= 3 {
		return w
	}
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return w
		}
	}
	switch {
	case strings.HasSuffix(w, "ies") && len(w) > 4:
		w = w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		w = w[:len(w)-1]
	}
	var base string
	switch {
	case strings.HasSuffix(w, "ing"):
		base = w[:len(w)-3]
	case strings.HasSuffix(w, "ed"):
		base = w[:len(w)-2]
	}
	if len(base) >= 3 && strings.ContainsAny(base, "aeiouy") {
		w = base
		if n := len(w); n >= 4 && w[n-1] == w[n-2] && !strings.ContainsRune("aeiouylsz", rune(w[n-1])) {
			w = w[:n-1]
		}
	}
	if len(w) >= 4 && w[len(w)-1] == 'e' {
		w = w[:len(w)-1]
	}
	return w
}

// Closest returns up to n of candidates nearest to name, nearest first, for
// "did you mean" messages; nil if n <= 0, name is empty or none is near.
//
// Comparisons ignore case. A candidate is near when its Damerau-Levenshtein
// distance to name (the optimal string alignment variant, over runes) is at
// most max(2, runes in name/2), when one contains the other (for strings of
// 3 runes or more), or when their terms (as Search splits and stems them)
// overlap: one's terms include the other's, or they share at least half of
// them ("read_file" is near "read_text_file"). Candidates are ranked by
// distance divided by the longer length, minus half the share of common
// terms, minus 0.25 if one is a prefix of the other or 0.15 if one is
// otherwise a substring of the other; then by distance, then by name.
// Repeated candidates count once. Names longer than maxDistanceRunes are
// compared by their terms and substrings only, which bounds the work per
// candidate.
func Closest(name string, candidates []string, n int) []string {
	if n <= 0 || name == "" {
		return nil
	}
	lname := strings.ToLower(name)
	nrunes := []rune(lname)
	maxDist := max(2, len(nrunes)/2)
	nterms := uniqueTerms(name)

	type scored struct {
		name string
		key  float64
		dist int
	}
	var near []scored
	seen := make(map[string]bool, len(candidates))
	for _, cand := range candidates {
		if cand == "" || seen[cand] {
			continue
		}
		seen[cand] = true
		lc := strings.ToLower(cand)
		crunes := []rune(lc)
		// The distance costs len(a)*len(b): past maxDistanceRunes it would
		// cost the host more than a suggestion is worth, and such names are
		// matched by their terms and substrings only.
		dist := max(len(nrunes), len(crunes))
		if len(nrunes) <= maxDistanceRunes && len(crunes) <= maxDistanceRunes {
			dist = suggest.Distance(nrunes, crunes)
		}
		bonus := 0.0
		if min(len(nrunes), len(crunes)) >= 3 {
			switch {
			case strings.HasPrefix(lc, lname) || strings.HasPrefix(lname, lc):
				bonus = 0.25
			case strings.Contains(lc, lname) || strings.Contains(lname, lc):
				bonus = 0.15
			}
		}
		share, subset := termOverlap(nterms, uniqueTerms(cand))
		if dist > maxDist && bonus == 0 && !subset && share < 0.5 {
			continue
		}
		longer := max(len(nrunes), len(crunes))
		near = append(near, scored{
			name: cand,
			key:  float64(dist)/float64(longer) - share/2 - bonus,
			dist: dist,
		})
	}
	slices.SortFunc(near, func(a, b scored) int {
		switch {
		case a.key != b.key:
			if a.key < b.key {
				return -1
			}
			return 1
		case a.dist != b.dist:
			return a.dist - b.dist
		}
		return strings.Compare(a.name, b.name)
	})
	if len(near) == 0 {
		return nil
	}
	out := make([]string, 0, min(n, len(near)))
	for _, s := range near[:min(n, len(near))] {
		out = append(out, s.name)
	}
	return out
}

// maxDistanceRunes bounds the names Closest computes an edit distance for.
const maxDistanceRunes = suggest.MaxRunes

// uniqueTerms returns the distinct search terms of s.
func uniqueTerms(s string) []string {
	terms := appendTokens(nil, s)
	slices.Sort(terms)
	return slices.Compact(terms)
}

// termOverlap returns the Jaccard index of two sets of terms (sorted,
// distinct) and whether one, non-empty, is a subset of the other.
func termOverlap(a, b []string) (share float64, subset bool) {
	if len(a) == 0 || len(b) == 0 {
		return 0, false
	}
	common := 0
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch strings.Compare(a[i], b[j]) {
		case 0:
			common++
			i++
			j++
		case -1:
			i++
		default:
			j++
		}
	}
	union := len(a) + len(b) - common
	return float64(common) / float64(union), common == min(len(a), len(b))
}

// summaryMaxRunes is the longest Summary, in runes.
const summaryMaxRunes = 100

// abbreviations end with a period that does not end a sentence.
var abbreviations = map[string]bool{
	"e.g": true, "i.e": true, "eg": true, "ie": true, "etc": true, "vs": true,
	"cf": true, "approx": true, "incl": true,
}

// Summary returns the first sentence or line of description, whichever
// ends first, with its runs of white space collapsed, at most 100 runes
// long: a longer one is cut at a word boundary and ends with "…".
// A sentence ends at ".", "!" or "?" followed by white space (a period after
// "e.g", "i.e", "etc" and such does not count), or at "。".
func Summary(description string) string {
	s := strings.TrimSpace(description)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	for i, r := range s {
		end := -1
		switch r {
		case '。':
			end = i + len("。")
		case '.', '!', '?':
			next, _ := utf8.DecodeRuneInString(s[i+1:])
			if !unicode.IsSpace(next) {
				continue
			}
			if r == '.' {
				word := s[strings.LastIndexFunc(s[:i], unicode.IsSpace)+1 : i]
				if abbreviations[strings.ToLower(word)] {
					continue
				}
			}
			end = i + 1
		default:
			continue
		}
		s = s[:end]
		break
	}
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= summaryMaxRunes {
		return s
	}
	// Keep room for the ellipsis.
	cut := 0
	for n := 0; n < summaryMaxRunes-1; n++ {
		_, size := utf8.DecodeRuneInString(s[cut:])
		cut += size
	}
	t := s[:cut]
	if s[cut] != ' ' {
		if i := strings.LastIndexByte(t, ' '); i > 0 {
			t = t[:i]
		}
	}
	t = strings.TrimRight(t, " ,;:-–—([{")
	return t + "…"
}
