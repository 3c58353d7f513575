package artifacts

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// Kind is how the bridge renders a file: as an image, as text, or as
// bytes.
type Kind int

// The kinds of file. Blob is the zero value: what is not known to be an
// image or UTF-8 text is bytes.
const (
	Blob  Kind = iota // bytes (base64 in the result)
	Text              // valid UTF-8 without NUL, sent as text
	Image             // PNG, JPEG, GIF or WebP, checked by its signature
)

// String is the kind's name for logs: "blob", "text" or "image".
func (k Kind) String() string {
	switch k {
	case Text:
		return "text"
	case Image:
		return "image"
	}
	return "blob"
}

// OctetStream is the MIME type of bytes of no known type.
const OctetStream = "application/octet-stream"

// sniffLen is how much of a file's beginning classification looks at for
// signatures.
const sniffLen = 512

// Classify says what a file is from its name and its bytes (all of them:
// text must be valid UTF-8 throughout). Images are known by their
// signature (magic bytes), whatever the name says; a file named as an
// image whose bytes are not that image is a blob, and note says so. Text
// types are known by the extension, and other valid UTF-8 without NUL is
// text/plain; a text-named file that is not UTF-8 is a blob, with a note.
// note is "" when the name and the bytes agree.
func Classify(name string, data []byte) (mime string, kind Kind, note string) {
	var s sniffer
	s.Write(data)
	return s.classify(name)
}

// sniffer classifies a file whose bytes arrive in pieces, keeping only
// its first sniffLen bytes and whether all of it so far is UTF-8 without
// NUL: constant memory, whatever the file's size.
type sniffer struct {
	head    [sniffLen]byte
	headLen int
	notText bool    // invalid UTF-8 or a NUL seen
	pend    [4]byte // an incomplete UTF-8 sequence at the end of the last piece
	pendLen int
}

// Write takes the next piece of the file.
func (s *sniffer) Write(p []byte) {
	s.headLen += copy(s.head[s.headLen:], p)
	if s.notText || len(p) == 0 {
		return
	}
	if bytes.IndexByte(p, 0) >= 0 {
		s.notText = true
		return
	}
	// Complete a sequence the last piece ended in.
	for s.pendLen > 0 && len(p) > 0 {
		s.pend[s.pendLen] = p[0]
		s.pendLen++
		p = p[1:]
		if utf8.FullRune(s.pend[:s.pendLen]) {
			if r, n := utf8.DecodeRune(s.pend[:s.pendLen]); r == utf8.RuneError && n <= 1 || n != s.pendLen {
				s.notText = true
				return
			}
			s.pendLen = 0
		}
	}
	if len(p) == 0 {
		return
	}
	// Hold back an incomplete sequence at the end.
	cut := len(p)
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				cut = i
			}
			break
		}
	}
	if !utf8.Valid(p[:cut]) {
		s.notText = true
		return
	}
	s.pendLen = copy(s.pend[:], p[cut:])
}

// text is whether the whole file was valid UTF-8 without NUL.
func (s *sniffer) text() bool { return !s.notText && s.pendLen == 0 }

// classify is Classify once all the bytes were written.
func (s *sniffer) classify(name string) (mime string, kind Kind, note string) {
	head := s.head[:s.headLen]
	ext := strings.ToLower(extension(name))
	if m := imageSignature(head); m != "" {
		return m, Image, ""
	}
	if want := imageByExt(ext); want != "" {
		return OctetStream, Blob, "named " + ext + " but not a " + want + " (no " + want + " signature): returned as bytes"
	}
	if m, magic, what := blobByExt(ext); m != "" {
		if magic == nil || magic(head) {
			return m, Blob, ""
		}
		return OctetStream, Blob, "named " + ext + " but not " + what + ": returned as bytes"
	}
	m := textByExt(ext)
	if !s.text() {
		if m != "" {
			return OctetStream, Blob, "named " + ext + " but not UTF-8 text: returned as bytes (write text files as UTF-8)"
		}
		return OctetStream, Blob, ""
	}
	if m == "" {
		m = "text/plain"
	}
	return m, Text, ""
}

// extension is name's extension with its dot (".png"), or "" when its
// last part has none or only a leading dot.
func extension(name string) string {
	base := name[strings.LastIndexByte(name, '/')+1:]
	i := strings.LastIndexByte(base, '.')
	if i <= 0 {
		return ""
	}
	return base[i:]
}

// imageSignature is the MIME type of the image whose signature head
// starts with, or "".
func imageSignature(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(head, []byte("\xff\xd8\xff")):
		return "image/jpeg"
	case bytes.HasPrefix(head, []byte("GIF87a")), bytes.HasPrefix(head, []byte("GIF89a")):
		return "image/gif"
	case len(head) >= 12 && string(head[:4]) == "RIFF" && string(head[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}

// imageByExt is the image format an extension names ("PNG"), or "".
func imageByExt(ext string) string {
	switch ext {
	case ".png":
		return "PNG"
	case ".jpg", ".jpeg", ".jpe":
		return "JPEG"
	case ".gif":
		return "GIF"
	case ".webp":
		return "WebP"
	}
	return ""
}

// blobByExt is the MIME type of a binary format an extension names, with
// its signature check (nil: none) and what to call it in a note.
func blobByExt(ext string) (mime string, magic func([]byte) bool, what string) {
	zip := func(h []byte) bool {
		return bytes.HasPrefix(h, []byte("PK\x03\x04")) || bytes.HasPrefix(h, []byte("PK\x05\x06"))
	}
	const ooxml = "application/vnd.openxmlformats-officedocument."
	switch ext {
	case ".pdf":
		return "application/pdf", func(h []byte) bool { return bytes.HasPrefix(h, []byte("%PDF-")) }, "a PDF"
	case ".zip":
		return "application/zip", zip, "a zip file"
	case ".xlsx":
		return ooxml + "spreadsheetml.sheet", zip, "an xlsx file (a zip)"
	case ".docx":
		return ooxml + "wordprocessingml.document", zip, "a docx file (a zip)"
	case ".pptx":
		return ooxml + "presentationml.presentation", zip, "a pptx file (a zip)"
	case ".gz", ".tgz":
		return "application/gzip", func(h []byte) bool { return bytes.HasPrefix(h, []byte("\x1f\x8b")) }, "gzip data"
	case ".parquet":
		return "application/vnd.apache.parquet", func(h []byte) bool { return bytes.HasPrefix(h, []byte("PAR1")) }, "a Parquet file"
	case ".tar":
		return "application/x-tar", nil, ""
	case ".xls":
		return "application/vnd.ms-excel", nil, ""
	case ".npy":
		return "application/x-npy", func(h []byte) bool { return bytes.HasPrefix(h, []byte("\x93NUMPY")) }, "a NumPy array"
	case ".sqlite":
		return "application/vnd.sqlite3", func(h []byte) bool { return bytes.HasPrefix(h, []byte("SQLite format 3\x00")) }, "an SQLite database"
	}
	return "", nil, ""
}

// textByExt is the MIME type of a text format an extension names, or "".
func textByExt(ext string) string {
	switch ext {
	case ".svg":
		return "image/svg+xml"
	case ".csv":
		return "text/csv"
	case ".tsv", ".tab":
		return "text/tab-separated-values"
	case ".json", ".geojson", ".ipynb":
		return "application/json"
	case ".jsonl", ".ndjson":
		return "application/jsonl"
	case ".md", ".markdown":
		return "text/markdown"
	case ".html", ".htm":
		return "text/html"
	case ".txt", ".log", ".text", ".out", ".ini", ".cfg", ".conf", ".rst":
		return "text/plain"
	case ".py":
		return "text/x-python"
	case ".yaml", ".yml":
		return "application/yaml"
	case ".toml":
		return "application/toml"
	case ".xml":
		return "application/xml"
	case ".css":
		return "text/css"
	case ".js", ".mjs":
		return "text/javascript"
	case ".sql":
		return "application/sql"
	case ".sh":
		return "text/x-shellscript"
	case ".tex":
		return "text/x-tex"
	}
	return ""
}
