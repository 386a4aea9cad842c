package main

import (
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
)

func TestNetAndDial(t *testing.T) {
	_, url := newServer(t)

	code, body := get(t, url+"/net")
	var itfs []Interface
	if err := json.Unmarshal([]byte(body), &itfs); code != 200 || err != nil {
		t.Fatalf("/net: %d %v\n%s", code, err, body)
	}
	found := false
	for _, i := range itfs {
		for _, a := range i.Addrs {
			found = found || strings.HasPrefix(a, "127.0.0.1/")
		}
	}
	if !found {
		t.Errorf("/net shows no 127.0.0.1: %s", body)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "hello there\n")
			c.Close()
		}
	}()
	code, body = get(t, url+"/dial?addr="+l.Addr().String())
	var res DialResult
	if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil || !res.OK || res.Line != "hello there" {
		t.Errorf("/dial to a listener: %d %v %+v", code, err, res)
	}

	// A port nobody listens on: refused, reported, not an HTTP error.
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l2.Addr().String()
	l2.Close()
	code, body = get(t, url+"/dial?addr="+closed+"&ms=2000")
	res = DialResult{}
	if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil || res.OK || res.Error == "" {
		t.Errorf("/dial to a closed port: %d %v %+v", code, err, res)
	}

	for _, q := range []string{"", "?addr=localhost:80", "?addr=127.0.0.1", "?addr=127.0.0.1:1&ms=x"} {
		if code, body := get(t, url+"/dial"+q); code != 400 {
			t.Errorf("/dial%s: %d %s, want 400", q, code, body)
		}
	}
}
