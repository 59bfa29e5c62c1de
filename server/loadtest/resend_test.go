package loadtest

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestPostResendsOnClosedConnection: a server that closes its first
// kept-alive connection on the second request, unanswered (as llama-server
// does now and then). A body net/http can send again goes out once more on
// a new connection and is counted; a trickled body cannot, and the request
// fails.
func TestPostResendsOnClosedConnection(t *testing.T) {
	for _, c := range []struct {
		name       string
		body       func() io.Reader
		wantStatus bool // the second request answered
		wantResent int64
	}{
		{"rewindable body", func() io.Reader { return strings.NewReader(`{"prompt":"hi"}`) }, true, 1},
		{"trickled body", func() io.Reader { return &trickle{r: strings.NewReader(`{"prompt":"hi"}`)} }, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var conns atomic.Int32
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					go serveDroppingSecond(conn, conns.Add(1) == 1)
				}
			}()
			p := &poster{client: &http.Client{Transport: &http.Transport{}}}
			url := "http://" + ln.Addr().String() + "/v1/completions"
			for i := range 2 {
				resp, err := p.postReader(context.Background(), url, c.body(), int64(len(`{"prompt":"hi"}`)))
				if i == 1 && !c.wantStatus {
					if err == nil {
						resp.Body.Close()
						t.Fatalf("request 2 answered %d, want an error (the connection closed unanswered)", resp.StatusCode)
					}
					continue
				}
				if err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("request %d: status %d", i+1, resp.StatusCode)
				}
			}
			if got := p.resent.Load(); got != c.wantResent {
				t.Errorf("resent %d, want %d", got, c.wantResent)
			}
		})
	}
}

// serveDroppingSecond answers HTTP/1.1 requests on conn with 200 and a
// kept-alive connection; with drop, it reads the second request and closes
// the connection without answering.
func serveDroppingSecond(conn net.Conn, drop bool) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i := 0; ; i++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		if drop && i == 1 {
			return
		}
		if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
			return
		}
	}
}
