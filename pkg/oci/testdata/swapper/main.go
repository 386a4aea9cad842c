// Command swapper plays both sides of the subPath race in
// TestSubPathRace.
//
//	swapper swap DIR HOST   makes DIR/a a directory and DIR/b a symbolic
//	                        link to HOST, says "swapping", then swaps a
//	                        between the two again and again (for at most
//	                        ten minutes)
//	swapper check DIR       says "escaped" if DIR/marker exists (the host
//	                        directory is mounted there) and tries to leave
//	                        a file behind in it, else "contained"
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: swapper swap DIR HOST | swapper check DIR")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "swap":
		swap(os.Args[2], os.Args[3])
	case "check":
		dir := os.Args[2]
		if _, err := os.Stat(filepath.Join(dir, "marker")); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "written-by-the-container"), []byte("escaped"), 0o644)
			fmt.Println("escaped")
			return
		}
		fmt.Println("contained")
	}
}

func swap(dir, host string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.Mkdir(a, 0o777); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.Symlink(host, b); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("swapping")
	// An atomic exchange where the kernel has one. gVisor 20221219 has
	// not: there the directory moves aside to "c" and a link takes its
	// name, then the link goes and the directory comes back. The
	// directory itself lives on either way (a removed directory could
	// not be mounted at all).
	exchange := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE) == nil
	c := filepath.Join(dir, "c")
	end := time.Now().Add(10 * time.Minute)
	for i := 0; time.Now().Before(end); i++ {
		var err error
		switch {
		case exchange:
			err = unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
		case i%2 == 0:
			if err = os.Rename(a, c); err == nil {
				err = os.Symlink(host, a)
			}
		default:
			if err = os.Remove(a); err == nil {
				err = os.Rename(c, a)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// Now and then a pause, so that either state lasts long enough
		// for a start to see it. Without the exchange, the directory
		// holds for 40ms and the link for 5ms: the steps themselves take
		// long under gVisor's ptrace platform (the link's removal most),
		// and the directory would be back for a moment only.
		switch {
		case !exchange && i%2 == 0:
			time.Sleep(5 * time.Millisecond)
		case !exchange:
			time.Sleep(40 * time.Millisecond)
		case i%16 == 0:
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		}
	}
}
