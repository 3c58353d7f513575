package artifacts

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

const (
	pngSig  = "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
	jpegSig = "\xff\xd8\xff\xe0\x00\x10JFIF\x00"
	gifSig  = "GIF89a\x01\x00\x01\x00"
	webpSig = "RIFF\x24\x00\x00\x00WEBPVP8 "
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name, data string
		mime       string
		kind       Kind
		note       string // a substring of the note; "" wants none
	}{
		{"plot.png", pngSig, "image/png", Image, ""},
		{"PLOT.PNG", pngSig, "image/png", Image, ""},
		{"photo.jpg", jpegSig, "image/jpeg", Image, ""},
		{"photo.jpeg", jpegSig, "image/jpeg", Image, ""},
		{"a.gif", gifSig, "image/gif", Image, ""},
		{"a.gif", "GIF87a\x01\x00", "image/gif", Image, ""},
		{"a.webp", webpSig, "image/webp", Image, ""},
		{"no-extension", pngSig, "image/png", Image, ""},
		{"plots/misnamed.jpg", pngSig, "image/png", Image, ""}, // the signature wins
		{"fake.png", "hello, not a png", OctetStream, Blob, "named .png but not a PNG"},
		{"fake.jpg", "\x89PNG", OctetStream, Blob, "named .jpg but not a JPEG"},
		{"empty.png", "", OctetStream, Blob, "not a PNG"},
		{"short.webp", "RIFF\x00\x00", OctetStream, Blob, "not a WebP"},
		{"d.svg", `<svg xmlns="http://www.w3.org/2000/svg"/>`, "image/svg+xml", Text, ""},
		{"d.csv", "a,b\n1,2\n", "text/csv", Text, ""},
		{"d.tsv", "a\tb\n", "text/tab-separated-values", Text, ""},
		{"d.json", `{"a":1}`, "application/json", Text, ""},
		{"README.md", "# hi", "text/markdown", Text, ""},
		{"page.html", "<p>hi</p>", "text/html", Text, ""},
		{"run.log", "ok\n", "text/plain", Text, ""},
		{"a.txt", "héllo wörld ✓ 🎉", "text/plain", Text, ""},
		{"a.py", "print(1)\n", "text/x-python", Text, ""},
		{"a.yaml", "a: 1\n", "application/yaml", Text, ""},
		{"a.xml", "<a/>", "application/xml", Text, ""},
		{"notes", "plain words", "text/plain", Text, ""},
		{"empty", "", "text/plain", Text, ""},
		{".hidden", "x", "text/plain", Text, ""},
		{"latin1.csv", "caf\xe9,1\n", OctetStream, Blob, "named .csv but not UTF-8 text"},
		{"nul.txt", "a\x00b", OctetStream, Blob, "not UTF-8 text"},
		{"data.bin", "\x00\x01\x02", OctetStream, Blob, ""},
		{"data", "\xff\xfe", OctetStream, Blob, ""},
		{"r.pdf", "%PDF-1.7\n", "application/pdf", Blob, ""},
		{"r.pdf", "not a pdf", OctetStream, Blob, "named .pdf but not a PDF"},
		{"a.zip", "PK\x03\x04rest", "application/zip", Blob, ""},
		{"t.xlsx", "PK\x03\x04rest", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", Blob, ""},
		{"t.xlsx", "a,b", OctetStream, Blob, "not an xlsx file"},
		{"a.gz", "\x1f\x8b\x08", "application/gzip", Blob, ""},
		{"a.tar", "whatever", "application/x-tar", Blob, ""},
	}
	for _, tt := range tests {
		mime, kind, note := Classify(tt.name, []byte(tt.data))
		if mime != tt.mime || kind != tt.kind {
			t.Errorf("Classify(%q, %q) = %s, %v; want %s, %v", tt.name, tt.data, mime, kind, tt.mime, tt.kind)
		}
		if tt.note == "" && note != "" || !strings.Contains(note, tt.note) {
			t.Errorf("Classify(%q, %q) note %q; want one with %q", tt.name, tt.data, note, tt.note)
		}
	}
}

// TestSnifferPieces: text found valid or not whatever the pieces the
// bytes come in, runes split across them included.
func TestSnifferPieces(t *testing.T) {
	inputs := []string{
		"héllo wörld ✓ 🎉 done", "a🎉", "🎉", "日本語のテキスト", "\xef\xbf\xbd", // U+FFFD itself is valid
		"caf\xe9", "\xe2\x82", "ok\xf0\x9f\x8e", "a\x00b", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "🎉\x80",
	}
	for _, in := range inputs {
		want := utf8.ValidString(in) && !strings.Contains(in, "\x00")
		for size := 1; size <= len(in); size++ {
			var s sniffer
			for p := []byte(in); len(p) > 0; {
				n := min(size, len(p))
				s.Write(p[:n])
				p = p[n:]
			}
			if s.text() != want {
				t.Errorf("%q in pieces of %d: text %v, want %v", in, size, s.text(), want)
			}
		}
	}
}

func TestSnifferKeepsHead(t *testing.T) {
	var s sniffer
	data := append([]byte(pngSig), bytes.Repeat([]byte{1}, 3*sniffLen)...)
	for i := 0; i < len(data); i += 7 {
		s.Write(data[i:min(i+7, len(data))])
	}
	if mime, kind, _ := s.classify("x.png"); mime != "image/png" || kind != Image {
		t.Errorf("got %s, %v", mime, kind)
	}
	if s.headLen != sniffLen {
		t.Errorf("head %d bytes, want %d", s.headLen, sniffLen)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Blob: "blob", Text: "text", Image: "image", Kind(9): "blob"} {
		if k.String() != want {
			t.Errorf("%d: %q, want %q", int(k), k.String(), want)
		}
	}
}
