package filepages

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestParseMaps(t *testing.T) {
	in := `00400000-01c2e000 r-xp 00000000 fd:01 1837462                            /usr/local/bin/knbox
03a6d000-03b2f000 rw-p 0366c000 fd:01 1837462                            /usr/local/bin/knbox
c000000000-c000400000 rw-p 00000000 00:00 0 
7f3a4c000000-7f3a4c021000 rw-p 00000000 00:00 0                          [heap]
7ffd1b9e4000-7ffd1b9e6000 r-xp 00000000 00:00 0                          [vdso]
`
	got, err := parseMaps([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{
		{0x400000, 0x1c2e000, false, unix.Mkdev(0xfd, 1), 1837462},
		{0x3a6d000, 0x3b2f000, true, unix.Mkdev(0xfd, 1), 1837462},
		{0xc000000000, 0xc000400000, true, 0, 0},
		{0x7f3a4c000000, 0x7f3a4c021000, true, 0, 0},
		{0x7ffd1b9e4000, 0x7ffd1b9e6000, false, 0, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("%d mappings, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{
		"00400000 r-xp 00000000 fd:01 1",          // no range
		"00400000-0040x000 r-xp 00000000 fd:01 1", // not hex
		"00500000-00400000 r-xp 00000000 fd:01 1", // backwards
		"00400000-00500000 r-xp 00000000 fd01 1",  // no device
		"00400000-00500000 r-xp 00000000 fd:01",   // no inode
		"00400000-00500000 r 00000000 fd:01 1",    // no permissions
	} {
		if _, err := parseMaps([]byte(bad + "\n")); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestUnmap: in this process, the resident pages of the test binary's
// read-only mappings drop; what runs after that (this test) maps a few
// back in.
func TestUnmap(t *testing.T) {
	mapAll(t)
	before := residentExe(t)
	advised, err := Unmap(Self)
	if err != nil {
		t.Fatal(err)
	}
	after := residentExe(t)
	t.Logf("advised %d KiB; resident read-only pages of the binary %d KiB before, %d KiB after", advised>>10, before, after)
	if advised == 0 || before == 0 {
		t.Fatalf("advised %d bytes of the binary, %d KiB were resident: found no mapping of it", advised, before)
	}
	// The test's own code since (reading smaps, logging) faults some back.
	if after*4 > before*3 {
		t.Fatalf("resident read-only pages of the binary: %d KiB before, %d KiB after; want at most three quarters", before, after)
	}
}

// mapAll maps in every page of this process's read-only mappings of its
// executable: reading them through /proc/self/mem faults them in.
func mapAll(t *testing.T) {
	maps, err := readOnlyMappings(Self)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	buf := make([]byte, 1<<20)
	for _, m := range maps {
		for off := m.start; off < m.end; off += uint64(len(buf)) {
			n := min(uint64(len(buf)), m.end-off)
			if _, err := mem.ReadAt(buf[:n], int64(off)); err != nil {
				t.Fatalf("read %#x+%d of /proc/self/mem: %v", off, n, err)
			}
		}
	}
}

// residentExe is the resident KiB of this process's read-only mappings
// of its own executable, from /proc/self/smaps.
func residentExe(t *testing.T) uint64 {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	return resident(t, exe, true)
}

// TestRefresh: after Unmap and Refresh, touching one page of a mapped
// file maps back at most the 64 KiB around it (the kernel's default
// fault-around), whatever folios the file's cache held before: on Linux
// 6.18 with ext4, without Refresh the one page maps 2 MiB here (the
// write made one 2 MiB folio).
func TestRefresh(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{1}, 4<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, 4<<20, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	sum := 0
	for i := 0; i < len(m); i += 4096 {
		sum += int(m[i])
	}
	if _, err := Unmap(path); err != nil {
		t.Fatal(err)
	}
	if err := Refresh(path); err != nil {
		t.Fatal(err)
	}
	// WILLNEED reads in the background: touch once all of it is cached.
	vec := make([]byte, len(m)/4096)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatal(errno)
		}
		if !bytes.Contains(vec, []byte{0}) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if bytes.Contains(vec, []byte{0}) {
		t.Fatalf("%d of %d pages cached 30s after Refresh", len(vec)-bytes.Count(vec, []byte{0}), len(vec))
	}
	if got := resident(t, path, false); got != 0 {
		t.Fatalf("%d KiB mapped after Unmap, want 0", got)
	}
	sum += int(m[1<<21])
	if got := resident(t, path, false); got == 0 || got > 64 {
		t.Fatalf("one page touched after Refresh maps %d KiB, want 4..64", got)
	}
	if sum != 1025 {
		t.Fatalf("read %d, want 1025", sum)
	}
}

// resident is the resident KiB of this process's mappings of path (only
// the read-only ones with readOnly), from /proc/self/smaps.
func resident(t *testing.T, path string, readOnly bool) uint64 {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var kib uint64
	ours := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			ours = len(f) >= 6 && f[5] == path && (!readOnly || f[1][1] != 'w')
		case ours && len(f) >= 2 && f[0] == "Rss:":
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatalf("smaps: %q", l)
			}
			kib += n
		}
	}
	return kib
}
