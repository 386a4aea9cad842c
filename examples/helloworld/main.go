// Command helloworld is the sample that examples/hello.yaml runs: the
// Knative helloworld-go sample's behaviour (it answers "Hello $TARGET!"
// on $PORT), built from source by `make run` into an image archive that
// knbox loads, so the first Service works on a machine without internet.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	target := os.Getenv("TARGET")
	if target == "" {
		target = "World"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "Hello %s!\n", target)
	})
	log.Printf("helloworld: listening on :%s", port)
	srv := &http.Server{Addr: ":" + port, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
