package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// all returns the built-in kinds and the operator patterns given as
// name, expr pairs.
func all(t testing.TB, patterns ...string) []Kind {
	t.Helper()
	var ks []Kind
	for _, n := range Builtins() {
		k, ok := Builtin(n)
		if !ok {
			t.Fatalf("Builtin(%q) not found", n)
		}
		ks = append(ks, k)
	}
	for i := 0; i < len(patterns); i += 2 {
		k, err := Pattern(patterns[i], patterns[i+1])
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, k)
	}
	return ks
}

func builtin(t testing.TB, name string) Kind {
	t.Helper()
	k, ok := Builtin(name)
	if !ok {
		t.Fatalf("Builtin(%q) not found", name)
	}
	return k
}

// quote is s as a JSON document.
func quote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// tokenizeText tokenizes the one string s and returns the result's string.
func tokenizeText(t *testing.T, v *Vault, s string, kinds []Kind) string {
	t.Helper()
	out, _, err := v.Tokenize(quote(s), kinds)
	if err != nil {
		t.Fatalf("Tokenize(%q): %v", s, err)
	}
	var got string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("Tokenize(%q) = %s: %v", s, out, err)
	}
	return got
}

func TestBuiltinFinders(t *testing.T) {
	tests := map[string][]struct {
		in   string
		want []string // nil: no match
	}{
		"email": {
			{"ann@example.com", []string{"ann@example.com"}},
			{"Mail Ann.Lee+tag@Mail.Example.CO.UK.", []string{"Ann.Lee+tag@Mail.Example.CO.UK"}},
			{"<bob_o%x-y@sub-domain.example.org>", []string{"bob_o%x-y@sub-domain.example.org"}},
			{"a@b.io,c@d.dev;e@f.xn", []string{"a@b.io", "c@d.dev", "e@f.xn"}},
			{"see..john@x.com", []string{"john@x.com"}},
			{".john@x.com", []string{"john@x.com"}},
			{"mailto:ann@example.com?subject=hi", []string{"ann@example.com"}},
			{"+15551234567@sms.example.com", []string{"+15551234567@sms.example.com"}},
			{`{"email":"ann@example.com"}`, []string{"ann@example.com"}},
			{strings.Repeat("a", 64) + "@example.com", []string{strings.Repeat("a", 64) + "@example.com"}},
			{"ann@example.com/x o'brien@x.org", []string{"ann@example.com", "brien@x.org"}},
			{"ann@example.com-x", nil},
			{"@handle", nil},
			{"user@localhost", nil},
			{"user@192.168.0.1", nil},
			{"user@example.c", nil},
			{"user.@example.com", nil},
			{"user@-example.com", nil},
			{"user@example-.com", nil},
			{"user@example..com", nil},
			{"user@exa_mple.com", nil},
			{"ann@example.com1", nil},
			{strings.Repeat("a", 65) + "@example.com", nil},
			{"10 @ 5.00 each", nil},
			{"2024-01-15", nil},
			{"<EMAIL_1> and <EMAIL_12>", nil},
		},
		"phone": {
			{"+1 (555) 123-4567", []string{"+1 (555) 123-4567"}},
			{"+44 20 7946 0958", []string{"+44 20 7946 0958"}},
			{"+44 (0)20 7946 0958", []string{"+44 (0)20 7946 0958"}},
			{"+33.1.23.45.67.89", []string{"+33.1.23.45.67.89"}},
			{"+41 44 668 18 00", []string{"+41 44 668 18 00"}},
			{"+4915112345678", []string{"+4915112345678"}},
			{"+1-555-123-4567", []string{"+1-555-123-4567"}},
			{"tel:+14155550123;", []string{"+14155550123"}},
			{"+1 555 123 4567 12345", []string{"+1 555 123 4567"}},
			{"(555) 123-4567", []string{"(555) 123-4567"}},
			{"(555)123-4567", []string{"(555)123-4567"}},
			{"(555) 123 4567", []string{"(555) 123 4567"}},
			{"555-123-4567", []string{"555-123-4567"}},
			{"555.123.4567", []string{"555.123.4567"}},
			{"1-800-555-1234", []string{"1-800-555-1234"}},
			{"call 555-123-4567.", []string{"555-123-4567"}},
			{"(555-123-4567)", []string{"555-123-4567"}},
			{"a: 555-123-4567, b: +1 555 123 4567", []string{"555-123-4567", "+1 555 123 4567"}},
			{"2024-01-15", nil},
			{"2024-01-15T10:30:00+01:00", nil},
			{"2024-01-15 10:30:00.123456", nil},
			{"10:30:00", nil},
			{"+05:30 +0530", nil},
			{"12345678", nil},
			{"5551234567", nil},
			{"id 123-456-7890-12", nil},
			{"ORD-555-123-4567", nil},
			{"555-123-45678", nil},
			{"555-123.4567", nil},
			{"555 123 4567", nil},
			{"1234.5678", nil},
			{"+1234.5678", nil},
			{"$1,234,567.89 +1,234,567", nil},
			{"v1.555.123.4567", nil},
			{"+1234567", nil},
			{"+12345678901234567", nil},
			{"1e+10 3+12345678", nil},
			{"4111 1111 1111 1111", nil},
			{"4111-1111-1111-1111", nil},
			{"192.168.100.200", nil},
			{"+1 (555 123 4567", nil},
			{"<PHONE_1> <EMAIL_12> <CARD_123>", nil},
			{"+15551234567x", nil},
		},
		"card": {
			{"4111111111111111", []string{"4111111111111111"}},
			{"4111 1111 1111 1111", []string{"4111 1111 1111 1111"}},
			{"4111-1111-1111-1111", []string{"4111-1111-1111-1111"}},
			{"3782 822463 10005", []string{"3782 822463 10005"}},
			{"5555555555554444", []string{"5555555555554444"}},
			{"6011111111111117", []string{"6011111111111117"}},
			{"4222222222222", []string{"4222222222222"}},
			{"Card: 4111 1111 1111 1111 exp 12/25", []string{"4111 1111 1111 1111"}},
			{"4111 1111 1111 1111 12/25", []string{"4111 1111 1111 1111"}},
			{"2024 4111111111111111", []string{"4111111111111111"}},
			{"ref-4111111111111111.", []string{"4111111111111111"}},
			{"4111111111111112", nil},
			{"4111 1111 1111 1112", nil},
			{"0000000000000000", nil},
			{"1705312800000", nil},
			{"7992739871300000", nil},
			{"ID4111111111111111", nil},
			{"4111111111111111abc", nil},
			{"41111111111111111111", nil},
			{"4111 11 11 1111 1111", nil},
			{"2024-01-15", nil},
			{"+1 555 123 4567", nil},
			{"<CARD_1>", nil},
		},
		"iban": {
			{"DE89370400440532013000", []string{"DE89370400440532013000"}},
			{"DE89 3704 0044 0532 0130 00", []string{"DE89 3704 0044 0532 0130 00"}},
			{"GB29 NWBK 6016 1331 9268 19", []string{"GB29 NWBK 6016 1331 9268 19"}},
			{"GB29NWBK60161331926819", []string{"GB29NWBK60161331926819"}},
			{"FR14 2004 1010 0505 0001 3M02 606", []string{"FR14 2004 1010 0505 0001 3M02 606"}},
			{"NL91ABNA0417164300", []string{"NL91ABNA0417164300"}},
			{"IBAN: CH9300762011623852957, BIC x", []string{"CH9300762011623852957"}},
			{"DE89 3704 0044 0532 0130 00 1234", []string{"DE89 3704 0044 0532 0130 00"}},
			{"DE88370400440532013000", nil},
			{"DE89 3704 0044 0532 0130 01", nil},
			{"de89370400440532013000", nil},
			{"XDE89370400440532013000", nil},
			{"DE89370400440532013000x", nil},
			{"DE893704004405320130001234567890123456", nil},
			{"DE8937040044", nil},
			{"DE89-3704-0044-0532-0130-00", nil},
			{"2024-01-15 4111111111111111", nil},
			{"<IBAN_1>", nil},
		},
	}
	for kind, cases := range tests {
		k := builtin(t, kind)
		for _, c := range cases {
			var got []string
			for _, m := range k.appendMatches(nil, c.in) {
				got = append(got, c.in[m.start:m.end])
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%s in %q: found %q, want %q", kind, c.in, got, c.want)
			}
		}
	}
}

func TestPrecedence(t *testing.T) {
	kinds := all(t, "digits", `[0-9]{6,}`, "num", `[0-9]+`)
	for in, want := range map[string]string{
		// A card is no phone; an IBAN's digits are no card.
		"4111 1111 1111 1111":         "<CARD_1>",
		"DE89 3704 0044 0532 0130 00": "<IBAN_1>",
		// An e-mail's local part is no phone, no number.
		"+15551234567@sms.example.com": "<EMAIL_1>",
		// Built-in kinds before patterns; no pattern inside a placeholder.
		"ann@example.com 4111111111111111 123456 7": "<EMAIL_1> <CARD_1> <DIGITS_1> <NUM_1>",
		// Luhn-invalid: not a card, so the pattern takes it.
		"4111111111111112": "<DIGITS_1>",
	} {
		v := NewVault(100, 1000)
		if got := tokenizeText(t, v, in, kinds); got != want {
			t.Errorf("Tokenize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPattern(t *testing.T) {
	for _, c := range []struct{ name, expr string }{
		{"customer_id", `CUST-[0-9]{6}`},
		{"x", `x`},
		{"a1_b2", `(?i)\bticket #?\d+\b`},
		{"email", `[a-z]+@corp\.example`},
	} {
		k, err := Pattern(c.name, c.expr)
		if err != nil || k.Name() != c.name || k.prefix != strings.ToUpper(c.name) {
			t.Errorf("Pattern(%q, %q) = %+v, %v", c.name, c.expr, k, err)
		}
	}
	for _, c := range []struct{ name, expr string }{
		{"", `x`}, {"Customer", `x`}, {"1x", `x`}, {"a-b", `x`}, {"a b", `x`}, {"é", `x`}, {"_a", `x`},
		{"a", ``}, {"a", `(`}, {"a", `x{2,1}`}, {"a", `(?<=x)y`},
		{"a", `x*`}, {"a", `x?`}, {"a", `\b`}, {"a", `^`}, {"a", `$`}, {"a", `(|x)`}, {"a", `x|`},
		{"a", `(x*)(y?)`}, {"a", `x{0,3}`}, {"a", `\b(?:x*)\B`}, {"a", `()`},
	} {
		if k, err := Pattern(c.name, c.expr); err == nil {
			t.Errorf("Pattern(%q, %q) = %+v, want an error", c.name, c.expr, k)
		}
	}
	// Leftmost-longest, not leftmost-first.
	k, _ := Pattern("ref", `R-\d{2}|R-\d{2}-\d{2}`)
	if got := tokenizeText(t, NewVault(10, 100), "R-12-34", []Kind{k}); got != "<REF_1>" {
		t.Errorf("leftmost-longest: got %q", got)
	}
	// A zero Kind finds nothing.
	if got := tokenizeText(t, NewVault(10, 100), "ann@example.com", []Kind{{}}); got != "ann@example.com" {
		t.Errorf("zero Kind: got %q", got)
	}
}

func TestBuiltinNames(t *testing.T) {
	for _, n := range Builtins() {
		if k, ok := Builtin(n); !ok || k.Name() != n || k.prefix != strings.ToUpper(n) {
			t.Errorf("Builtin(%q) = %+v, %v", n, k, ok)
		}
	}
	if _, ok := Builtin("ssn"); ok {
		t.Error(`Builtin("ssn") found`)
	}
	b := Builtins()
	b[0] = "changed"
	if Builtins()[0] != "email" {
		t.Error("Builtins shares its slice")
	}
}

func TestStable(t *testing.T) {
	v := NewVault(100, 10000)
	kinds := all(t)
	in := `{"a":"ann@example.com, +44 20 7946 0958","b":["bob@example.org","ann@example.com"]}`
	out, n, err := v.Tokenize([]byte(in), kinds)
	want := `{"a":"<EMAIL_1>, <PHONE_1>","b":["<EMAIL_2>","<EMAIL_1>"]}`
	if err != nil || n != 4 || string(out) != want {
		t.Fatalf("Tokenize = %s, %d, %v; want %s, 4", out, n, err, want)
	}
	// Another call, another tool: the same values, the same placeholders.
	out, n, err = v.Tokenize([]byte(`["bob@example.org","cy@example.net","+44 20 7946 0958"]`), kinds)
	if want := `["<EMAIL_2>","<EMAIL_3>","<PHONE_1>"]`; err != nil || n != 3 || string(out) != want {
		t.Fatalf("Tokenize = %s, %d, %v; want %s, 3", out, n, err, want)
	}
	if v.Len() != 4 {
		t.Errorf("Len = %d, want 4", v.Len())
	}
}

func TestUnchanged(t *testing.T) {
	v := NewVault(100, 10000)
	for _, in := range []string{`{"a":"nothing here","n":[1,2.50,-3e10]}`, `"x"`, `null`, ` [ ] `, `{"date":"2024-01-15"}`} {
		js := []byte(in)
		out, n, err := v.Tokenize(js, all(t))
		if err != nil || n != 0 || &out[0] != &js[0] || len(out) != len(js) {
			t.Errorf("Tokenize(%s) = %s, %d, %v; want js itself", in, out, n, err)
		}
		out, n, err = v.Restore(js)
		if err != nil || n != 0 || &out[0] != &js[0] {
			t.Errorf("Restore(%s) = %s, %d, %v; want js itself", in, out, n, err)
		}
	}
	// Only changed strings are re-encoded: numbers, key order, spacing and
	// other strings' escapes stay byte for byte.
	in := "{ \"z\" : 1.50000000000000000001,\n \"big\": 123456789012345678901234567890, \"a\": \"ann@example.com\", \"e\":\"caf\\u00e9 \\/\" }"
	out, _, err := v.Tokenize([]byte(in), all(t))
	want := "{ \"z\" : 1.50000000000000000001,\n \"big\": 123456789012345678901234567890, \"a\": \"<EMAIL_1>\", \"e\":\"caf\\u00e9 \\/\" }"
	if err != nil || string(out) != want {
		t.Errorf("Tokenize = %s, %v; want %s", out, err, want)
	}
}

func TestEscapedInput(t *testing.T) {
	v := NewVault(100, 10000)
	in := `{"a":"ann\u0040example.com","b":"<b>bob@example.org</b> & \"q\"\n\u2028"}`
	out, n, err := v.Tokenize([]byte(in), all(t))
	if err != nil || n != 2 {
		t.Fatalf("Tokenize = %s, %d, %v", out, n, err)
	}
	if !bytes.Contains(out, []byte(`"<EMAIL_1>"`)) || !bytes.Contains(out, []byte(`<b><EMAIL_2></b> & \"q\"\n`)) {
		t.Errorf("Tokenize = %s: placeholders escaped or missing", out)
	}
	back, _, err := v.Restore(out)
	if err != nil || !sameJSON(t, back, []byte(in)) {
		t.Errorf("Restore = %s, %v", back, err)
	}
}

func TestUnquote(t *testing.T) {
	for _, lit := range []string{
		`"plain"`, `""`, `"\u00e9\/\b\f\n\r\t\"\\"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00\ud83d"`,
		`"\ud83dx"`, `"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`, `"\uD83D\uDE00\uFFFD\u0000"`,
		"\"\xff\"", "\"\xe2\x82\"", "\"caf\xc3\xa9 \xed\xa0\x80\"", "\"\u2028\"",
	} {
		if !checkUnquote(t, []byte(lit)) {
			t.Errorf("unquote(%s) differs from encoding/json", lit)
		}
	}
}

// checkUnquote reports whether unquote decodes every string literal of the
// valid JSON js as encoding/json does.
func checkUnquote(t testing.TB, js []byte) bool {
	t.Helper()
	src := string(js)
	for i := 0; ; {
		start, end := nextString(src, i)
		if start < 0 {
			return true
		}
		i = end
		var want string
		if err := json.Unmarshal(js[start:end], &want); err != nil {
			t.Fatalf("%s: %v", js[start:end], err)
		}
		if got := unquote(src[start+1 : end-1]); got != want {
			t.Logf("unquote(%s) = %q, want %q", js[start:end], got, want)
			return false
		}
	}
}

func TestJSONText(t *testing.T) {
	// A tool that returns JSON as text: just a string, searched as one.
	inner := `{"users":[{"email":"ann@example.com","phone":"+1 555 123 4567"}]}`
	doc, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": inner}}})
	v := NewVault(100, 10000)
	out, n, err := v.Tokenize(doc, all(t))
	if err != nil || n != 2 {
		t.Fatalf("Tokenize = %s, %d, %v", out, n, err)
	}
	var got struct{ Content []struct{ Text string } }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if want := `{"users":[{"email":"<EMAIL_1>","phone":"<PHONE_1>"}]}`; got.Content[0].Text != want {
		t.Errorf("text = %s, want %s", got.Content[0].Text, want)
	}
}

func TestKeysAndNesting(t *testing.T) {
	v := NewVault(100, 10000)
	in := `{"ann@example.com":{"phones":[["+44 20 7946 0958",[{"4111111111111111":true}]]]},"k":[[[[["DE89370400440532013000"]]]]]}`
	out, n, err := v.Tokenize([]byte(in), all(t))
	want := `{"<EMAIL_1>":{"phones":[["<PHONE_1>",[{"<CARD_1>":true}]]]},"k":[[[[["<IBAN_1>"]]]]]}`
	if err != nil || n != 4 || string(out) != want {
		t.Errorf("Tokenize = %s, %d, %v; want %s", out, n, err, want)
	}
	// Deep nesting: no recursion here; encoding/json's own depth limit
	// (10000) makes deeper input invalid.
	deep := strings.Repeat(`[`, 9000) + `"ann@example.com"` + strings.Repeat(`]`, 9000)
	out, n, err = v.Tokenize([]byte(deep), nil)
	if err != nil || n != 1 || !bytes.Contains(out, []byte(`["<EMAIL_1>"]`)) {
		t.Errorf("deep: %d, %v", n, err)
	}
	tooDeep := strings.Repeat(`[`, 20000) + strings.Repeat(`]`, 20000)
	if _, _, err := v.Tokenize([]byte(tooDeep), nil); !errors.Is(err, ErrNotJSON) {
		t.Errorf("too deep: %v", err)
	}
}

func TestNotJSON(t *testing.T) {
	v := NewVault(100, 10000)
	for _, in := range []string{``, ` `, `{`, `{"a":}`, `nul`, `"abc`, `{"a":"b"} x`, `'a'`, "\"a\x01\"", `{"a":"ann@example.com",}`} {
		if out, _, err := v.Tokenize([]byte(in), all(t)); !errors.Is(err, ErrNotJSON) || out != nil {
			t.Errorf("Tokenize(%q) = %q, %v; want ErrNotJSON", in, out, err)
		}
		if out, _, err := v.Restore([]byte(in)); !errors.Is(err, ErrNotJSON) || out != nil {
			t.Errorf("Restore(%q) = %q, %v; want ErrNotJSON", in, out, err)
		}
	}
}

func TestRestore(t *testing.T) {
	v := NewVault(100, 10000)
	quoteKind, _ := Pattern("quoted", `Q"[a-z]+\\"`)
	if _, _, err := v.Tokenize([]byte(`["ann@example.com","+44 20 7946 0958","Q\"x\\\""]`), append(all(t), quoteKind)); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		`{"to":"<EMAIL_1>","cc":["x <EMAIL_1>, <PHONE_1>."]}`: `{"to":"ann@example.com","cc":["x ann@example.com, +44 20 7946 0958."]}`,
		`{"<EMAIL_1>":1}`:                   `{"ann@example.com":1}`,
		`"\u003cEMAIL_1\u003e"`:             `"ann@example.com"`,
		`"<<EMAIL_1>>"`:                     `"<ann@example.com>"`,
		`"<QUOTED_1>"`:                      `"Q\"x\\\""`,
		`"<EMAIL_2> <PHONE_9> <CARD_1>"`:    ``, // unknown
		`"<EMAIL_1 <EMAIL_01> <email_1>"`:   ``, // look-alikes
		`"< EMAIL_1> <EMAIL_1 > <EMAIL-1>"`: ``,
		`"EMAIL_1 <EMAIL_> <_1> <1>"`:       ``,
		`{"n":1,"s":"no placeholder"}`:      ``,
	} {
		out, n, err := v.Restore([]byte(in))
		if want == "" {
			want = in
		}
		if err != nil || string(out) != want || (n == 0) != (want == in) {
			t.Errorf("Restore(%s) = %s, %d, %v; want %s", in, out, n, err, want)
		}
	}
	// Restored values are not searched again; placeholder text in a value
	// stays.
	if out, n, _ := v.Restore([]byte(`"<EMAIL_1><PHONE_1>"`)); n != 2 || string(out) != `"ann@example.com+44 20 7946 0958"` {
		t.Errorf("adjacent: %s, %d", out, n)
	}
	// An empty vault restores nothing.
	js := []byte(`"<EMAIL_1>"`)
	if out, n, err := NewVault(1, 100).Restore(js); n != 0 || err != nil || &out[0] != &js[0] {
		t.Errorf("empty vault: %s, %d, %v", out, n, err)
	}
}

// sameJSON reports whether a and b decode to the same value.
func sameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	return reflect.DeepEqual(decode(t, a), decode(t, b))
}

func decode(t testing.TB, js []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var x any
	if err := d.Decode(&x); err != nil {
		t.Fatalf("decode %q: %v", js, err)
	}
	return x
}

func TestRoundTrip(t *testing.T) {
	v := NewVault(1000, 1<<20)
	kinds := all(t, "customer_id", `\bCUST-[0-9]{6}\b`)
	for _, in := range []string{
		`{"content":[{"type":"text","text":"Ann <ann@example.com>, +1 (555) 123-4567, card 4111-1111-1111-1111, DE89 3704 0044 0532 0130 00, CUST-123456"}]}`,
		`{"ann@example.com":["bob@example.org",{"x":"555.123.4567 and (555) 987-6543"}],"n":1e400}`,
		`["a\u0040b.co","caf\u00e9 cy@d.io \ud83d\ude00","\"q\"@x.io"]`,
		`"CUST-123456CUST-654321 CUST-654321"`,
	} {
		out, _, err := v.Tokenize([]byte(in), kinds)
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := v.Restore(out)
		if err != nil || !sameJSON(t, back, []byte(in)) {
			t.Errorf("Restore(Tokenize(%s)) = %s, %v (tokenized %s)", in, back, err, out)
		}
	}
}

func TestScrub(t *testing.T) {
	v := NewVault(100, 10000)
	if _, _, err := v.Tokenize([]byte(`"ann@example.com"`), all(t)); err != nil {
		t.Fatal(err)
	}
	// A tool whose results are not tokenized: held values are replaced all
	// the same, wherever they are, bytes exactly (another case is another
	// value, found only by kinds).
	in := `{"log":"sent to ann@example.com, then xann@example.com.au and ANN@example.com","ann@example.com":1}`
	out, n, err := v.Tokenize([]byte(in), nil)
	want := `{"log":"sent to <EMAIL_1>, then x<EMAIL_1>.au and ANN@example.com","<EMAIL_1>":1}`
	if err != nil || n != 3 || string(out) != want {
		t.Errorf("Tokenize = %s, %d, %v; want %s", out, n, err, want)
	}
	// With kinds, a new longer value wins over the held one inside it.
	out, _, _ = v.Tokenize([]byte(`"mary.ann@example.com"`), all(t))
	if string(out) != `"<EMAIL_2>"` {
		t.Errorf("longer value: %s", out)
	}
	// A value found anywhere in a result is replaced everywhere in it, also
	// where its kind does not match it, and earlier.
	key, _ := Pattern("key", `\bK-[0-9]{4}\b`)
	out, n, _ = v.Tokenize([]byte(`["zK-1234","K-1234"]`), []Kind{key})
	if string(out) != `["z<KEY_1>","<KEY_1>"]` || n != 2 {
		t.Errorf("found later: %s, %d", out, n)
	}
	// Placeholders are never matched again, by a held value or a kind.
	num, _ := Pattern("num", `[0-9]+`)
	w := NewVault(100, 1000)
	out, _, _ = w.Tokenize([]byte(`"ann@example.com 1"`), append(all(t), num))
	if string(out) != `"<EMAIL_1> <NUM_1>"` {
		t.Fatalf("Tokenize = %s", out)
	}
	again, n, err := w.Tokenize(out, append(all(t), num))
	if err != nil || n != 0 || !bytes.Equal(again, out) || w.Len() != 2 {
		t.Errorf("tokenizing placeholders: %s, %d, %v, Len %d", again, n, err, w.Len())
	}
	// A look-alike the vault does not know is ordinary text.
	out, _, _ = w.Tokenize([]byte(`"<X_2> <EMAIL_7>"`), []Kind{num})
	if string(out) != `"<X_<NUM_2>> <EMAIL_<NUM_3>>"` {
		t.Errorf("look-alike: %s", out)
	}
}

func TestFull(t *testing.T) {
	three := []byte(`["a@example.com","b@example.com","c@example.com"]`)
	v := NewVault(2, 1000)
	out, _, err := v.Tokenize(three, all(t))
	if !errors.Is(err, ErrFull) || out != nil || v.Len() != 0 {
		t.Fatalf("3 values in 2: %s, %v, Len %d", out, err, v.Len())
	}
	if strings.Contains(err.Error(), "example") {
		t.Errorf("error quotes a value: %v", err)
	}
	// Nothing was added: two fit, numbered from 1.
	out, _, err = v.Tokenize([]byte(`["b@example.com","a@example.com","b@example.com"]`), all(t))
	if err != nil || string(out) != `["<EMAIL_1>","<EMAIL_2>","<EMAIL_1>"]` {
		t.Errorf("2 values in 2: %s, %v", out, err)
	}
	// Known values take no room.
	if _, _, err := v.Tokenize([]byte(`"a@example.com b@example.com"`), all(t)); err != nil {
		t.Errorf("known values: %v", err)
	}
	if _, _, err := v.Tokenize([]byte(`"c@example.com"`), all(t)); !errors.Is(err, ErrFull) {
		t.Errorf("third value: %v", err)
	}

	// Bytes: 13 + 13 > 20.
	b := NewVault(10, 20)
	if _, _, err := b.Tokenize([]byte(`"a@example.com"`), all(t)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Tokenize([]byte(`"b@example.com"`), all(t)); !errors.Is(err, ErrFull) || b.Len() != 1 {
		t.Errorf("bytes: %v, Len %d", err, b.Len())
	}
	// Longer than MaxValueLen.
	long, _ := Pattern("long", `x+`)
	if _, _, err := NewVault(10, 1<<20).Tokenize(quote(strings.Repeat("x", MaxValueLen+1)), []Kind{long}); !errors.Is(err, ErrFull) {
		t.Errorf("long value: %v", err)
	}
	// No room at all: fine until a value is found.
	z := NewVault(0, 0)
	if _, n, err := z.Tokenize([]byte(`"nothing"`), all(t)); err != nil || n != 0 {
		t.Errorf("empty vault, nothing found: %d, %v", n, err)
	}
	if _, _, err := z.Tokenize([]byte(`"a@example.com"`), all(t)); !errors.Is(err, ErrFull) {
		t.Errorf("empty vault: %v", err)
	}
}

func TestHostile(t *testing.T) {
	// Many values: the vault's bound stops them.
	var b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&b, "u%d@example.com ", i)
	}
	if _, _, err := NewVault(1000, 1<<20).Tokenize(quote(b.String()), all(t)); !errors.Is(err, ErrFull) {
		t.Errorf("5000 values in 1000: %v", err)
	}
	// A huge string with nothing to find is returned as is.
	huge := quote(strings.Repeat("lorem ipsum 2024-01-15 12:30 +5 (55) 4111 ", 1<<15))
	if out, n, err := NewVault(10, 1000).Tokenize(huge, all(t)); err != nil || n != 0 || &out[0] != &huge[0] {
		t.Errorf("huge: %d, %v", n, err)
	}
	// Held values that begin one another (a…ab), and text that begins them
	// all at every byte: ErrCost, not minutes.
	ab, _ := Pattern("ab", `a+b`)
	v := NewVault(10000, 1<<20)
	b.Reset()
	for i := 1; i <= 300; i++ {
		b.WriteString(strings.Repeat("a", i) + "b ")
	}
	if _, _, err := v.Tokenize(quote(b.String()), []Kind{ab}); err != nil || v.Len() != 300 {
		t.Fatalf("Tokenize: %v, Len %d", err, v.Len())
	}
	if _, _, err := v.Tokenize(quote(strings.Repeat("a", 64<<10)), nil); !errors.Is(err, ErrCost) {
		t.Errorf("costly: %v", err)
	}
	// A stretch of such text within other text stays within the budget.
	if _, n, err := v.Tokenize(quote(strings.Repeat("a", 299)+strings.Repeat("x", 64<<10)), nil); err != nil || n != 0 {
		t.Errorf("long value: %d, %v", n, err)
	}
}

func TestConcurrent(t *testing.T) {
	v := NewVault(10000, 1<<20)
	kinds := all(t)
	const workers, calls = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range calls {
				in := fmt.Sprintf(`{"shared":"user%d@example.com","own":"w%d.c%d@example.org","n":"+1 555 %03d %04d"}`, c%10, w, c, w, c)
				out, _, err := v.Tokenize([]byte(in), kinds)
				if err == nil {
					var back []byte
					back, _, err = v.Restore(out)
					if err == nil && !bytes.Equal(back, []byte(in)) {
						err = fmt.Errorf("Restore(Tokenize(%s)) = %s", in, back)
					}
				}
				if err == nil && bytes.Contains(out, []byte("@")) {
					err = fmt.Errorf("Tokenize(%s) = %s", in, out)
				}
				if err != nil {
					errs <- err
					return
				}
				_ = v.Len()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if want := 10 + 2*workers*calls; v.Len() != want {
		t.Errorf("Len = %d, want %d", v.Len(), want)
	}
	// One placeholder per value: user3@example.com has one, whoever found it.
	out, _, _ := v.Tokenize([]byte(`"user3@example.com"`), nil)
	holder := string(out[1 : len(out)-1])
	if n := strings.Count(strings.Join(v.holders, " "), holder+" "); n != 1 {
		t.Errorf("%s given %d times", holder, n)
	}
}

// placeholderRE is the shape of a placeholder.
var placeholderRE = regexp.MustCompile(`<[A-Z][A-Z0-9_]*_[0-9]+>`)

// strs returns every string in x, keys included.
func strs(x any, out []string) []string {
	switch x := x.(type) {
	case string:
		out = append(out, x)
	case []any:
		for _, e := range x {
			out = strs(e, out)
		}
	case map[string]any:
		for k, e := range x {
			out = strs(e, append(out, k))
		}
	}
	return out
}

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{
		`{"content":[{"type":"text","text":"Ann <ann@example.com>, +1 (555) 123-4567, 4111 1111 1111 1111, DE89 3704 0044 0532 0130 00, K123"}]}`,
		`["a\u0040b.co","555.123.4567","(555) 123-4567 x","GB29NWBK60161331926819"]`,
		`{"ann@example.com":{"k":[1,2.5,"K999 K999 +44 20 7946 0958"]}}`,
		`"<EMAIL_1> ann@example.com"`,
		`{"a":"\"q\"@x.io \ud83d\ude00 \u2028 <b>&</b>"}`,
		`[[[["2024-01-15T10:30:00+01:00","+05:30","1e+10"]]]]`,
		`"\xff\xfeann@example.com"`,
		`nul`,
	} {
		f.Add([]byte(s))
	}
	key, err := Pattern("key", `\bK[0-9]{3}\b`)
	if err != nil {
		f.Fatal(err)
	}
	kinds := append(all(f), key)
	f.Fuzz(func(t *testing.T, js []byte) {
		v := NewVault(1000, 1<<20)
		out, n, err := v.Tokenize(js, kinds)
		if !json.Valid(js) {
			if !errors.Is(err, ErrNotJSON) {
				t.Fatalf("invalid JSON: %v", err)
			}
			return
		}
		if !checkUnquote(t, js) {
			t.Fatalf("unquote differs from encoding/json in %q", js)
		}
		if errors.Is(err, ErrFull) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out) {
			t.Fatalf("Tokenize(%q) = %q: not JSON", js, out)
		}
		if n == 0 && !bytes.Equal(out, js) {
			t.Fatalf("Tokenize(%q) = %q with no replacement", js, out)
		}
		// No held value is left in a string, outside placeholders.
		for _, s := range strs(decode(t, out), nil) {
			s = placeholderRE.ReplaceAllString(s, "\x00")
			for _, val := range v.values {
				if strings.Contains(s, val) {
					t.Fatalf("Tokenize(%q) = %q: a held value is left", js, out)
				}
			}
		}
		back, _, err := v.Restore(out)
		if err != nil {
			t.Fatal(err)
		}
		// Placeholders in the input itself are ambiguous: skip those.
		for _, s := range strs(decode(t, js), nil) {
			if placeholderRE.MatchString(s) {
				return
			}
		}
		if !sameJSON(t, back, js) {
			t.Fatalf("Restore(Tokenize(%q)) = %q (tokenized %q)", js, back, out)
		}
	})
}

// result is a realistic tool result of about size bytes: records as
// structured content and the same records as JSON text, an e-mail address
// (and a phone number) in one record of every emailEvery (0: none).
func result(size, emailEvery int) []byte {
	type rec struct {
		ID      int    `json:"id"`
		Name    string `json:"name"`
		Email   string `json:"email,omitempty"`
		Phone   string `json:"phone,omitempty"`
		Created string `json:"created"`
		Amount  string `json:"amount"`
		Status  string `json:"status"`
		Note    string `json:"note"`
	}
	var recs []rec
	for i := 0; ; i++ {
		r := rec{ID: 100000 + i, Name: fmt.Sprintf("Customer %d", i), Created: "2024-01-15T10:30:00Z",
			Amount: fmt.Sprintf("%d.%02d", i*7%10000, i%100), Status: "active",
			Note: "Order shipped on 2024-02-03 at 14:05; tracking 1Z999AA10123456784, ref INV-2024-00042, qty 3 x 19.99."}
		if emailEvery > 0 && i%emailEvery == 0 {
			r.Email = fmt.Sprintf("customer.%d@example.com", i)
			r.Phone = fmt.Sprintf("+1 555 %03d %04d", i%1000, i%10000)
		}
		recs = append(recs, r)
		if len(recs)*230 > size/2 {
			break
		}
	}
	text, _ := json.Marshal(recs)
	doc, _ := json.Marshal(map[string]any{
		"content":           []any{map[string]any{"type": "text", "text": string(text)}},
		"structuredContent": map[string]any{"records": recs},
	})
	return doc
}

func BenchmarkTokenize(b *testing.B) {
	js := result(1<<20, 10)
	kinds := all(b)
	b.Run("new", func(b *testing.B) { // a fresh vault: every value is new
		b.SetBytes(int64(len(js)))
		for b.Loop() {
			if _, _, err := NewVault(100000, 64<<20).Tokenize(js, kinds); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("known", func(b *testing.B) { // the vault holds them already
		v := NewVault(100000, 64<<20)
		_, n, _ := v.Tokenize(js, kinds)
		b.SetBytes(int64(len(js)))
		for b.Loop() {
			if _, _, err := v.Tokenize(js, kinds); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n), "replacements")
	})
	b.Run("reply", func(b *testing.B) { // known, as the reply to 1 KiB of arguments with a value in them
		v := NewVault(100000, 64<<20)
		_, _, _ = v.Tokenize(js, kinds)
		sent := []byte(`{"query":"` + strings.Repeat("customer ", 100) + `ann@example.com","limit":100}`)
		b.SetBytes(int64(len(js)))
		for b.Loop() {
			if _, _, err := v.TokenizeReply(js, kinds, sent); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scrub", func(b *testing.B) { // no kinds, held values only
		v := NewVault(100000, 64<<20)
		_, _, _ = v.Tokenize(js, kinds)
		b.SetBytes(int64(len(js)))
		for b.Loop() {
			if _, _, err := v.Tokenize(js, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkTokenizeNoMatch(b *testing.B) {
	js := result(1<<20, 0)
	kinds := all(b)
	b.Run("empty", func(b *testing.B) {
		b.SetBytes(int64(len(js)))
		for b.Loop() {
			if out, _, err := NewVault(1000, 1<<20).Tokenize(js, kinds); err != nil || &out[0] != &js[0] {
				b.Fatal(err)
			}
		}
	})
	b.Run("held", func(b *testing.B) { // 10000 held values, none in js
		v := NewVault(100000, 64<<20)
		if _, _, err := v.Tokenize(result(4<<20, 2), kinds); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(js)))
		for b.Loop() {
			if out, _, err := v.Tokenize(js, kinds); err != nil || &out[0] != &js[0] {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(v.Len()), "held")
	})
}

func BenchmarkRestore(b *testing.B) {
	v := NewVault(100000, 64<<20)
	js := result(1<<20, 10)
	out, _, err := v.Tokenize(js, all(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("args", func(b *testing.B) {
		args := []byte(`{"to":["<EMAIL_1>","<EMAIL_2>"],"subject":"Your order <EMAIL_3>","body":"Dear customer, call <PHONE_1> or reply.","n":3}`)
		b.SetBytes(int64(len(args)))
		for b.Loop() {
			if _, n, err := v.Restore(args); err != nil || n != 4 {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("1MiB", func(b *testing.B) {
		b.SetBytes(int64(len(out)))
		for b.Loop() {
			if _, _, err := v.Restore(out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A reply that echoes what the request sent tells the sender nothing: a
// guessed value comes back as written, held or not, and is not held; what
// the request did not send is tokenized as ever.
func TestReplyIsNoOracle(t *testing.T) {
	v := NewVault(100, 10000)
	if _, _, err := v.Tokenize([]byte(`"ann@example.com"`), all(t)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, sent, reply, want string }{
		{"a right guess, held", `{"q":"ann@example.com"}`, `"you said ann@example.com"`, `"you said ann@example.com"`},
		{"a wrong guess", `{"q":"zed@example.com"}`, `"you said zed@example.com"`, `"you said zed@example.com"`},
		{"an escaped guess", `{"q":"ann\u0040example.com"}`, `"ann@example.com"`, `"ann@example.com"`},
		{"the guess, and a value not sent", `{"q":"zed@example.com"}`, `"zed@example.com knows ann@example.com and bob@example.org"`,
			`"zed@example.com knows <EMAIL_1> and <EMAIL_2>"`},
		{"a placeholder sent, its value back", `{"q":"<EMAIL_1>"}`, `"ann@example.com"`, `"<EMAIL_1>"`},
		{"a held value inside a longer one sent", `{"q":"mary.ann@example.com"}`, `"mary.ann@example.com"`, `"mary.ann@example.com"`},
		{"no request", ``, `"ann@example.com"`, `"<EMAIL_1>"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := v.TokenizeReply([]byte(tc.reply), all(t), []byte(tc.sent))
			if err != nil || string(out) != tc.want {
				t.Errorf("TokenizeReply = %s, %v; want %s", out, err, tc.want)
			}
		})
	}
	// Only bob@example.org was held on: no guess was.
	if v.Len() != 2 {
		t.Errorf("the vault holds %d values, want 2 (ann, bob)", v.Len())
	}
}
