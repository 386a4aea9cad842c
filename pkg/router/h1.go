package router

import (
	"bytes"
	"strconv"

	"golang.org/x/net/http/httpguts"
)

// This file holds the fast path's HTTP/1.1 framing: the request and
// response heads and chunked bodies. The rules are net/http's, made
// stricter where a proxy must be (RFC 9112 §11): lines end with CRLF, a
// message with both Content-Length and Transfer-Encoding, or with more
// than one Content-Length, is refused, obsolete line folding is refused.
// What the fast path does not handle (other versions, absolute or
// asterisk targets, CONNECT, Upgrade, Expect, heads larger than the
// connection's buffer) is handed to net/http before anything is read
// past the head, so net/http's own rules apply to it.

// Results of parsing a request head.
type parseResult int

const (
	headIncomplete parseResult = iota // need more bytes
	headOK                            // a request the fast path serves
	headHandover                      // valid or not, net/http decides
	headBad                           // 400
	headBadTE                         // 501: a transfer coding we do not know
)

// header is one header field; name and value are slices of the
// connection's buffer, value without its surrounding whitespace.
type header struct {
	name, value []byte
	kind        headerKind
}

// headerKind classifies the header names the proxy treats specially.
type headerKind uint8

const (
	hOther headerKind = iota
	hHost
	hContentLength
	hTransferEncoding
	hConnection
	hUpgrade
	hExpect
	hTE
	hTrailer
	hKeepAlive
	hProxyConnection
	hProxyAuthenticate
	hProxyAuthorization
	hXForwardedFor
	hXForwardedProto
	hXForwardedHost
	hForwarded
	hTraceparent
	hDate
	hHTTP2Settings
)

// headerKindOf classifies a header name, ignoring case.
func headerKindOf(name []byte) headerKind {
	switch len(name) {
	case 2:
		if asciiEqualFold(name, "te") {
			return hTE
		}
	case 4:
		switch {
		case asciiEqualFold(name, "host"):
			return hHost
		case asciiEqualFold(name, "date"):
			return hDate
		}
	case 6:
		if asciiEqualFold(name, "expect") {
			return hExpect
		}
	case 7:
		switch {
		case asciiEqualFold(name, "upgrade"):
			return hUpgrade
		case asciiEqualFold(name, "trailer"):
			return hTrailer
		}
	case 9:
		if asciiEqualFold(name, "forwarded") {
			return hForwarded
		}
	case 10:
		switch {
		case asciiEqualFold(name, "connection"):
			return hConnection
		case asciiEqualFold(name, "keep-alive"):
			return hKeepAlive
		}
	case 11:
		if asciiEqualFold(name, "traceparent") {
			return hTraceparent
		}
	case 14:
		switch {
		case asciiEqualFold(name, "content-length"):
			return hContentLength
		case asciiEqualFold(name, "http2-settings"):
			return hHTTP2Settings
		}
	case 15:
		if asciiEqualFold(name, "x-forwarded-for") {
			return hXForwardedFor
		}
	case 16:
		switch {
		case asciiEqualFold(name, "proxy-connection"):
			return hProxyConnection
		case asciiEqualFold(name, "x-forwarded-host"):
			return hXForwardedHost
		}
	case 17:
		switch {
		case asciiEqualFold(name, "transfer-encoding"):
			return hTransferEncoding
		case asciiEqualFold(name, "x-forwarded-proto"):
			return hXForwardedProto
		}
	case 18:
		if asciiEqualFold(name, "proxy-authenticate") {
			return hProxyAuthenticate
		}
	case 19:
		if asciiEqualFold(name, "proxy-authorization") {
			return hProxyAuthorization
		}
	}
	return hOther
}

// hopByHop reports whether a header of this kind is never forwarded as
// received: the hop-by-hop headers, and the ones knbox sets itself.
func (k headerKind) hopByHop() bool {
	switch k {
	case hConnection, hKeepAlive, hProxyConnection, hProxyAuthenticate, hProxyAuthorization,
		hTE, hTrailer, hTransferEncoding, hUpgrade, hHTTP2Settings:
		return true
	}
	return false
}

// asciiEqualFold reports whether b equals the lower-case ASCII s, ignoring
// the case of b.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// tokenTable marks the bytes of an RFC 9110 token.
var tokenTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenTable[c] {
			return false
		}
	}
	return true
}

// validFieldValue is httpguts.ValidHeaderFieldValue on bytes: no control
// byte but HTAB.
func validFieldValue(v []byte) bool {
	for _, c := range v {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// trimOWS drops leading and trailing spaces and tabs.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// hasToken reports whether the comma-separated list v holds token t
// (lower case), ignoring case and whitespace.
func hasToken(v []byte, t string) bool {
	for len(v) > 0 {
		var item []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			item, v = v[:i], v[i+1:]
		} else {
			item, v = v, nil
		}
		if asciiEqualFold(trimOWS(item), t) {
			return true
		}
	}
	return false
}

// parseDecimal parses a Content-Length: 1 to 18 digits, nothing else
// (net/http takes up to 2^63-1; 18 digits are an exabyte).
func parseDecimal(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// reqHead is a parsed request head. Its slices point into the
// connection's buffer and are valid until the request ends.
type reqHead struct {
	method, target []byte
	host           []byte
	headers        []header
	contentLength  int64 // -1: none
	chunked        bool
	close          bool // Connection: close
	teTrailers     bool // TE: trailers
	traceparent    bool // the client sent one
	connTokens     [][]byte
	size           int // bytes of the head, CRLFCRLF included
	reason         string
}

func (h *reqHead) reset() {
	h.method, h.target, h.host = nil, nil, nil
	h.headers = h.headers[:0]
	h.contentLength = -1
	h.chunked, h.close, h.teTrailers, h.traceparent = false, false, false, false
	h.connTokens = h.connTokens[:0]
	h.size = 0
	h.reason = ""
}

// hasBody reports whether the request has a body to forward.
func (h *reqHead) hasBody() bool { return h.chunked || h.contentLength > 0 }

// nextLine returns the line at the start of b without its CRLF and the
// length with it; n 0 if b holds no complete line; ok false if a line ends
// with a bare LF.
func nextLine(b []byte) (line []byte, n int, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, 0, true
	}
	if i == 0 || b[i-1] != '\r' {
		return nil, 0, false
	}
	return b[:i-1], i + 1, true
}

// parseRequestHead parses the request head at the start of b into h.
func parseRequestHead(b []byte, h *reqHead) parseResult {
	h.reset()
	line, n, ok := nextLine(b)
	switch {
	case !ok:
		h.reason = "bare LF"
		return headBad
	case n == 0:
		return headIncomplete
	case len(line) == 0:
		// Empty lines before a request: net/http tolerates some.
		return headHandover
	}
	// METHOD SP target SP version, each part non-empty: net/http splits
	// at the first two spaces.
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		h.reason = "malformed request line"
		return headBad
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 < 0 {
		h.reason = "malformed request line"
		return headBad
	}
	h.method, h.target = line[:sp1], rest[:sp2]
	version := rest[sp2+1:]
	if !isToken(h.method) {
		h.reason = "invalid method"
		return headBad
	}
	if string(version) != "HTTP/1.1" {
		return headHandover // HTTP/1.0, HTTP/2 preface, or invalid: net/http's call
	}
	switch {
	case string(h.method) == "CONNECT":
		return headHandover
	case len(h.target) == 0 || h.target[0] != '/':
		return headHandover // absolute or asterisk form, or invalid
	}
	if r := checkTarget(h.target); r != headOK {
		h.reason = "invalid request target"
		return r
	}

	hosts, cls, tes := 0, 0, 0
	var te []byte
	off := n
	for {
		line, n, ok := nextLine(b[off:])
		switch {
		case !ok:
			h.reason = "bare LF"
			return headBad
		case n == 0:
			return headIncomplete
		}
		off += n
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			h.reason = "obsolete line folding"
			return headBad
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			h.reason = "invalid header name"
			return headBad
		}
		hd := header{name: line[:colon], value: trimOWS(line[colon+1:])}
		if !validFieldValue(hd.value) {
			h.reason = "invalid header value"
			return headBad
		}
		hd.kind = headerKindOf(hd.name)
		switch hd.kind {
		case hHost:
			hosts++
			h.host = hd.value
		case hContentLength:
			cls++
			v, ok := parseDecimal(hd.value)
			if !ok {
				h.reason = "invalid Content-Length"
				return headBad
			}
			h.contentLength = v
		case hTransferEncoding:
			tes++
			te = hd.value
		case hConnection:
			if hasToken(hd.value, "upgrade") {
				return headHandover
			}
			h.close = h.close || hasToken(hd.value, "close")
			h.connTokens = appendTokens(h.connTokens, hd.value)
		case hUpgrade, hExpect, hHTTP2Settings:
			return headHandover
		case hTE:
			h.teTrailers = h.teTrailers || hasToken(hd.value, "trailers")
		case hTraceparent:
			h.traceparent = true
		}
		h.headers = append(h.headers, hd)
	}
	h.size = off
	switch {
	case hosts == 0:
		h.reason = "missing required Host header"
		return headBad
	case hosts > 1:
		h.reason = "too many Host headers"
		return headBad
	case !httpguts.ValidHostHeader(string(h.host)):
		h.reason = "malformed Host header"
		return headBad
	case cls > 1:
		h.reason = "more than one Content-Length"
		return headBad
	case tes > 0 && cls > 0:
		h.reason = "both Content-Length and Transfer-Encoding"
		return headBad
	case tes > 1:
		h.reason = "more than one Transfer-Encoding"
		return headBad
	case tes == 1 && !asciiEqualFold(te, "chunked"):
		return headBadTE
	}
	h.chunked = tes == 1
	if len(h.connTokens) > 0 {
		for i := range h.headers {
			if hd := &h.headers[i]; hd.kind == hOther && nominated(h.connTokens, hd.name) {
				hd.kind = hConnection // named by Connection: hop-by-hop
			}
		}
	}
	return headOK
}

// checkTarget checks an origin-form target as net/url's ParseRequestURI
// does for a request, stricter: printable ASCII only (anything else is
// net/http's call), and every % in the path followed by two hex digits.
func checkTarget(t []byte) parseResult {
	inPath := true
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c <= ' ' || c >= 0x7f:
			return headHandover
		case c == '?':
			inPath = false
		case c == '%' && inPath:
			if i+2 >= len(t) || !isHex(t[i+1]) || !isHex(t[i+2]) {
				return headBad
			}
		}
	}
	return headOK
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// appendTokens appends the items of a comma-separated list, lower-cased
// comparison is left to nominated.
func appendTokens(dst [][]byte, v []byte) [][]byte {
	for len(v) > 0 {
		var item []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			item, v = v[:i], v[i+1:]
		} else {
			item, v = v, nil
		}
		if item = trimOWS(item); len(item) > 0 && len(dst) < maxConnectionTokens {
			dst = append(dst, item)
		}
	}
	return dst
}

// maxConnectionTokens bounds the header names one Connection header can
// make hop-by-hop.
const maxConnectionTokens = 32

// nominated reports whether name is among the Connection tokens.
func nominated(tokens [][]byte, name []byte) bool {
	for _, t := range tokens {
		if bytes.EqualFold(t, name) {
			return true
		}
	}
	return false
}

// resHead is a parsed response head of an instance.
type resHead struct {
	status        int
	minor         int // HTTP/1.minor
	headers       []header
	contentLength int64 // -1: none
	chunked       bool
	close         bool
	hasDate       bool
	connTokens    [][]byte
	size          int
}

func (h *resHead) reset() {
	h.status, h.minor = 0, 0
	h.headers = h.headers[:0]
	h.contentLength = -1
	h.chunked, h.close, h.hasDate = false, false, false
	h.connTokens = h.connTokens[:0]
	h.size = 0
}

// resLine returns the line at the start of b, without its line end; an
// instance may end lines with a bare LF, as net/http's client allows.
func resLine(b []byte) (line []byte, n int) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, 0
	}
	line = b[:i]
	if i > 0 && b[i-1] == '\r' {
		line = b[:i-1]
	}
	return line, i + 1
}

// parseResponseHead parses the response head at the start of b into h;
// it returns headIncomplete, headOK or headBad (the response is not
// forwarded: 502).
func parseResponseHead(b []byte, h *resHead) parseResult {
	h.reset()
	line, n := resLine(b)
	if n == 0 {
		return headIncomplete
	}
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return headBad
	}
	switch line[7] {
	case '0':
		h.minor = 0
	case '1':
		h.minor = 1
	default:
		return headBad
	}
	code := line[9:12]
	for _, c := range code {
		if c < '0' || c > '9' {
			return headBad
		}
	}
	h.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	if h.status < 100 || !validFieldValue(line) {
		return headBad
	}
	cls, tes := 0, 0
	var cl []byte
	off := n
	for {
		line, n := resLine(b[off:])
		if n == 0 {
			return headIncomplete
		}
		off += n
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return headBad
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return headBad
		}
		hd := header{name: line[:colon], value: trimOWS(line[colon+1:])}
		if !validFieldValue(hd.value) {
			return headBad
		}
		hd.kind = headerKindOf(hd.name)
		switch hd.kind {
		case hContentLength:
			if cls > 0 && !bytes.Equal(cl, hd.value) {
				return headBad // net/http's client refuses differing ones too
			}
			cls++
			cl = hd.value
		case hTransferEncoding:
			tes++
			if tes > 1 || !asciiEqualFold(hd.value, "chunked") {
				return headBad
			}
		case hConnection:
			h.close = h.close || hasToken(hd.value, "close")
			h.connTokens = appendTokens(h.connTokens, hd.value)
		case hDate:
			h.hasDate = true
		}
		h.headers = append(h.headers, hd)
	}
	h.size = off
	if cls > 0 {
		v, ok := parseDecimal(cl)
		if !ok {
			return headBad
		}
		h.contentLength = v
	}
	if tes == 1 {
		h.chunked, h.contentLength = true, -1 // Transfer-Encoding wins (RFC 9112 §6.3)
	}
	if h.minor == 0 {
		h.close = true // no keep-alive to HTTP/1.0 instances
	}
	if len(h.connTokens) > 0 {
		for i := range h.headers {
			if hd := &h.headers[i]; hd.kind == hOther && nominated(h.connTokens, hd.name) {
				hd.kind = hConnection
			}
		}
	}
	return headOK
}

// bodyless reports whether a response to method with this status has no
// body whatever its headers say.
func bodyless(head bool, status int) bool {
	return head || status/100 == 1 || status == 204 || status == 304
}

// chunkedDecoder decodes a chunked body incrementally: feed it bytes, it
// returns the data in them and how much it consumed. It is strict: chunk
// lines end with CRLF, sizes are at most 15 hex digits, chunk extensions
// are dropped, trailer fields are checked like header fields.
type chunkedDecoder struct {
	state    int
	left     int64 // data bytes left in the current chunk
	trailer  []byte
	keepTail bool // keep the trailer section (to forward it)
}

const (
	chunkSize    = iota // at the start of a chunk-size line
	chunkData           // in chunk data
	chunkDataEnd        // the CRLF after chunk data
	chunkTrailer        // in the trailer section
	chunkDone
)

// maxChunkLine bounds a chunk-size line, extensions included (net/http's
// bound too), and the trailer section.
const (
	maxChunkLine    = 4096
	maxTrailerBytes = 64 << 10
)

var errChunked = chunkError("malformed chunked encoding")

type chunkError string

func (e chunkError) Error() string { return string(e) }

// decode consumes from b. It returns the number of bytes consumed and
// the data bytes found, as sub-slices of b appended to data. It consumes
// less than len(b) only when it needs more bytes to go on (a partial
// line) or the body has ended (done).
func (d *chunkedDecoder) decode(b []byte, data [][]byte) (consumed int, out [][]byte, err error) {
	out = data
	for consumed < len(b) && d.state != chunkDone {
		rest := b[consumed:]
		switch d.state {
		case chunkSize:
			line, n, ok := nextLine(rest)
			if !ok {
				return consumed, out, errChunked
			}
			if n == 0 {
				if len(rest) >= maxChunkLine {
					return consumed, out, errChunked
				}
				return consumed, out, nil
			}
			if n > maxChunkLine {
				return consumed, out, errChunked
			}
			size := line
			if i := bytes.IndexByte(line, ';'); i >= 0 {
				size = trimOWS(line[:i])
				if !validFieldValue(line[i:]) {
					return consumed, out, errChunked
				}
			}
			if len(size) == 0 || len(size) > 15 {
				return consumed, out, errChunked
			}
			v, err := strconv.ParseUint(string(size), 16, 64)
			if err != nil {
				return consumed, out, errChunked
			}
			consumed += n
			d.left = int64(v)
			if v == 0 {
				d.state = chunkTrailer
			} else {
				d.state = chunkData
			}
		case chunkData:
			n := int64(len(rest))
			if n > d.left {
				n = d.left
			}
			out = append(out, rest[:n])
			consumed += int(n)
			d.left -= n
			if d.left == 0 {
				d.state = chunkDataEnd
			}
		case chunkDataEnd:
			if len(rest) < 2 {
				if rest[0] != '\r' {
					return consumed, out, errChunked
				}
				return consumed, out, nil
			}
			if rest[0] != '\r' || rest[1] != '\n' {
				return consumed, out, errChunked
			}
			consumed += 2
			d.state = chunkSize
		case chunkTrailer:
			line, n, ok := nextLine(rest)
			if !ok {
				return consumed, out, errChunked
			}
			if n == 0 {
				if len(d.trailer)+len(rest) >= maxTrailerBytes {
					return consumed, out, errChunked
				}
				return consumed, out, nil
			}
			if len(line) > 0 {
				colon := bytes.IndexByte(line, ':')
				if line[0] == ' ' || line[0] == '\t' || colon <= 0 || !isToken(line[:colon]) ||
					!validFieldValue(line[colon+1:]) || len(d.trailer)+n > maxTrailerBytes {
					return consumed, out, errChunked
				}
				if k := headerKindOf(line[:colon]); d.keepTail && !k.hopByHop() && k != hContentLength {
					d.trailer = append(d.trailer, rest[:n]...)
				}
			} else {
				d.state = chunkDone
			}
			consumed += n
		}
	}
	return consumed, out, nil
}

// done reports whether the body has ended.
func (d *chunkedDecoder) done() bool { return d.state == chunkDone }

// reset readies the decoder for another body.
func (d *chunkedDecoder) reset(keepTrailer bool) {
	d.state, d.left, d.trailer, d.keepTail = chunkSize, 0, d.trailer[:0], keepTrailer
}

// appendChunk appends data as one chunk.
func appendChunk(dst, data []byte) []byte {
	if len(data) == 0 {
		return dst
	}
	dst = strconv.AppendUint(dst, uint64(len(data)), 16)
	dst = append(dst, '\r', '\n')
	dst = append(dst, data...)
	return append(dst, '\r', '\n')
}
