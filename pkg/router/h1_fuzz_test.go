package router

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// requestSeeds are request heads of every shape the fast path meets,
// smuggling attempts among them.
var requestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
	"GET /p/a%2Fth?a=1;b=2&c HTTP/1.1\r\nHost: a.example.com:8080\r\nX-A: 1\r\nx-a: 2\r\nCookie: a=b\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
	"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n",
	"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
	"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a?%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /\x80 HTTP/1.1\r\nHost: a\r\n\r\n",
	"G\x00T / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
	"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX:\r\n:y\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: \r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
}

// FuzzRequestHead is the differential test of the fast path's request
// parser: whatever it accepts, net/http's server accepts too, as the same
// request (method, target, host, headers, body framing and body bytes);
// smuggling shapes are refused.
func FuzzRequestHead(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h reqHead
		res := parseRequestHead(data, &h)
		if res != headOK {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			t.Fatalf("fast path accepted %q, net/http refuses it: %v", data, err)
		}
		// ReadRequest takes Host out of the header fields: read them
		// again as net/http's server sees them.
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(data)))
		if _, err := tp.ReadLine(); err != nil {
			t.Fatal(err)
		}
		mime, err := tp.ReadMIMEHeader()
		if err != nil {
			t.Fatalf("fast path accepted %q, net/http refuses its header: %v", data, err)
		}
		// net/http's server checks these after ReadRequest.
		if hosts := mime["Host"]; len(hosts) != 1 || !httpguts.ValidHostHeader(hosts[0]) {
			t.Fatalf("fast path accepted %q, net/http's server refuses its Host %q", data, hosts)
		}
		for k, vs := range mime {
			if !httpguts.ValidHeaderFieldName(k) {
				t.Fatalf("fast path accepted %q: invalid header name %q", data, k)
			}
			for _, v := range vs {
				if !httpguts.ValidHeaderFieldValue(v) {
					t.Fatalf("fast path accepted %q: invalid header value %q", data, v)
				}
			}
		}
		if req.Method != string(h.method) || req.RequestURI != string(h.target) || req.Host != string(h.host) {
			t.Fatalf("%q: fast path %q %q host %q; net/http %q %q host %q", data, h.method, h.target, h.host, req.Method, req.RequestURI, req.Host)
		}
		if req.ProtoMajor != 1 || req.ProtoMinor != 1 {
			t.Fatalf("%q: net/http saw %s", data, req.Proto)
		}
		// The same header fields (net/http folds the names, drops
		// Transfer-Encoding once it has read it, and adds Cache-Control
		// for Pragma: no-cache).
		want := http.Header{}
		for _, hd := range h.headers {
			want.Add(textproto.CanonicalMIMEHeaderKey(string(hd.name)), string(hd.value))
		}
		got := http.Header(mime)
		for _, k := range []string{"Transfer-Encoding", "Host"} {
			if !slices.Equal(want[k], got[k]) {
				t.Fatalf("%q: %s %q, net/http %q", data, k, want[k], got[k])
			}
		}
		if _, ok := want["Pragma"]; ok {
			delete(want, "Cache-Control")
			delete(got, "Cache-Control")
		}
		if len(want) != len(got) {
			t.Fatalf("%q: headers %q, net/http %q", data, want, got)
		}
		for k, vs := range want {
			if !slices.Equal(vs, got[k]) {
				t.Fatalf("%q: header %s %q, net/http %q", data, k, vs, got[k])
			}
		}
		// The same body framing.
		switch {
		case h.chunked:
			if !slices.Equal(req.TransferEncoding, []string{"chunked"}) || req.ContentLength != -1 {
				t.Fatalf("%q: chunked, net/http %q %d", data, req.TransferEncoding, req.ContentLength)
			}
		case req.ContentLength != max(h.contentLength, 0) || len(req.TransferEncoding) != 0:
			t.Fatalf("%q: length %d, net/http %q %d", data, h.contentLength, req.TransferEncoding, req.ContentLength)
		}
		// The body starts where the fast path says the head ends.
		if !h.chunked && h.contentLength > 0 && int64(len(data)-h.size) >= h.contentLength {
			body, err := io.ReadAll(req.Body)
			if err != nil || !bytes.Equal(body, data[h.size:h.size+int(h.contentLength)]) {
				t.Fatalf("%q: body %q, net/http %q (%v)", data, data[h.size:h.size+int(h.contentLength)], body, err)
			}
		}
	})
}

// TestSmugglingRefused: the shapes of request smuggling are refused with
// 400 by the fast path, never handed to net/http (which takes some).
func TestSmugglingRefused(t *testing.T) {
	t.Parallel()
	for name, head := range map[string]string{
		"CL and TE":             "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
		"TE and CL":             "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
		"duplicate CL":          "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
		"differing CL":          "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
		"CL list":               "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
		"CL sign":               "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
		"bare LF in head":       "GET / HTTP/1.1\nHost: a\r\n\r\n",
		"bare LF ends head":     "GET / HTTP/1.1\r\nHost: a\r\n\n",
		"bare CR":               "GET / HTTP/1.1\r\nHost: a\r\nX: 1\rTransfer-Encoding: chunked\r\n\r\n",
		"obs-fold":              "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n Transfer-Encoding: chunked\r\n\r\n",
		"space before colon":    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n",
		"two TE":                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"two hosts":             "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"no host":               "GET / HTTP/1.1\r\n\r\n",
		"NUL in value":          "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
		"bad escape in path":    "GET /%g0 HTTP/1.1\r\nHost: a\r\n\r\n",
		"empty header name":     "GET / HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n",
		"control in name":       "GET / HTTP/1.1\r\nHost: a\r\nX\x01: x\r\n\r\n",
		"TE with CL 0":          "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"huge Content-Length":   "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"Content-Length suffix": "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5x\r\n\r\n",
	} {
		var h reqHead
		if res := parseRequestHead([]byte(head), &h); res != headBad {
			t.Errorf("%s: parse result %d, want 400 (headBad)", name, res)
		}
	}
	var h reqHead
	if res := parseRequestHead([]byte("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"), &h); res != headBadTE {
		t.Errorf("unknown transfer coding: %d, want 501 (headBadTE)", res)
	}
}

// FuzzChunked compares the fast path's chunked decoder with net/http's:
// a body it decodes to the end, net/http decodes to the same bytes.
func FuzzChunked(f *testing.F) {
	for _, s := range []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		"a\r\n0123456789\r\n3\r\nabc\r\n0\r\n\r\n",
		"5\nhello\n0\n\n",
		"5\r\nhello\n0\r\n\r\n",
		"fffffffffffffffff\r\n",
		"0\r\n\r\n",
		"-1\r\n",
		"5 \r\nhello\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		var d chunkedDecoder
		d.reset(true)
		// Fed in pieces, as reads come.
		n := int(step%16) + 1
		var got []byte
		buf := []byte{}
		var err error
		for i := 0; i < len(data) && err == nil && !d.done(); i += n {
			buf = append(buf, data[i:min(i+n, len(data))]...)
			var used int
			var parts [][]byte
			used, parts, err = d.decode(buf, nil)
			for _, p := range parts {
				got = append(got, p...)
			}
			buf = append([]byte(nil), buf[used:]...)
		}
		if err != nil || !d.done() {
			return
		}
		want, werr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(data)))
		if werr != nil {
			t.Fatalf("fast path decoded %q to %q, net/http refuses it: %v", data, got, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%q: fast path %q, net/http %q", data, got, want)
		}
	})
}

// FuzzResponseHead feeds the instance-side parser arbitrary bytes (an
// instance is a tenant's): no panic, and a head it accepts net/http's
// client reads with the same status and framing.
func FuzzResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
		"HTTP/1.1 200\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
		"HTTP/1.0 404 Not Found\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 999 X\r\n\r\n",
		"HTTP/1.1 20 OK\r\n\r\n",
		"HTTP/2.0 200 OK\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h resHead
		if parseResponseHead(data, &h) != headOK {
			return
		}
		res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), nil)
		if err != nil {
			if strings.Contains(err.Error(), "malformed HTTP status code") && h.status >= 600 {
				return // net/http refuses codes over 599 (still 3 digits): knbox forwards them
			}
			t.Fatalf("fast path accepted %q, net/http refuses it: %v", data, err)
		}
		if res.StatusCode != h.status {
			t.Fatalf("%q: status %d, net/http %d", data, h.status, res.StatusCode)
		}
		if h.chunked != slices.Equal(res.TransferEncoding, []string{"chunked"}) {
			t.Fatalf("%q: chunked %v, net/http %q", data, h.chunked, res.TransferEncoding)
		}
	})
}
