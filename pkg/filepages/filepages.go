// Package filepages unmaps the pages of files that this process maps
// read-only and no longer uses, which count in its RSS while mapped. Its
// own executable first: every package's initialisation touches its own
// code and data, and the kernel maps the
// 64 KiB around each page touched (fault-around), so a Go binary of 77 MB
// has some 40 MiB of itself resident after its start, most of which it
// never runs again. A database file mapped for reading (bbolt's) keeps
// the pages of every read mapped in the same way.
package filepages

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mapping is one line of /proc/PID/maps: an address range and the file
// it maps, if any.
type mapping struct {
	start, end uint64
	writable   bool
	dev        uint64 // unix.Mkdev(major, minor)
	inode      uint64
}

// parseMaps reads the lines of /proc/PID/maps; a line it cannot read is
// an error, as the kernel writes them.
func parseMaps(b []byte) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			return nil, fmt.Errorf("maps line %q: fewer than 5 fields", sc.Text())
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		major, minor, ok2 := strings.Cut(f[3], ":")
		if !ok || !ok2 || len(f[1]) < 2 {
			return nil, fmt.Errorf("maps line %q: no address range or device", sc.Text())
		}
		var m mapping
		var err error
		nums := []struct {
			s    string
			base int
			to   *uint64
		}{{lo, 16, &m.start}, {hi, 16, &m.end}, {f[4], 10, &m.inode}}
		for _, n := range nums {
			if *n.to, err = strconv.ParseUint(n.s, n.base, 64); err != nil {
				return nil, fmt.Errorf("maps line %q: %w", sc.Text(), err)
			}
		}
		maj, err1 := strconv.ParseUint(major, 16, 32)
		minor2, err2 := strconv.ParseUint(minor, 16, 32)
		if err1 != nil || err2 != nil || m.end < m.start {
			return nil, fmt.Errorf("maps line %q: bad device or range", sc.Text())
		}
		m.dev = unix.Mkdev(uint32(maj), uint32(minor2))
		m.writable = f[1][1] == 'w'
		out = append(out, m)
	}
	return out, sc.Err()
}

// Self is the path of this process's own executable.
const Self = "/proc/self/exe"

// Unmap drops this process's read-only mappings of the file at path (for
// its own executable: code, read-only data, the runtime's tables):
// madvise(MADV_DONTNEED), which is exact for a read-only mapping of a file
// (nothing was copied on write: the pages mapped again are the file's). It
// does not evict them: they stay in the page cache, reclaimable as any
// file's cache is, and what the process still uses maps back in from
// there with a minor fault. It returns how many bytes of mappings it
// advised.
func Unmap(path string) (uint64, error) {
	maps, err := readOnlyMappings(path)
	if err != nil {
		return 0, err
	}
	var advised uint64
	for _, m := range maps {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), unix.MADV_DONTNEED); errno != 0 {
			return advised, fmt.Errorf("the pages of %s: madvise %#x-%#x: %w", path, m.start, m.end, errno)
		}
		advised += m.end - m.start
	}
	return advised, nil
}

// readOnlyMappings are this process's read-only mappings of the file at
// path, found by its device and inode in /proc/self/maps.
func readOnlyMappings(path string) ([]mapping, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("the pages of %s: %w", path, err)
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("the pages of %s: %w", path, err)
	}
	maps, err := parseMaps(b)
	if err != nil {
		return nil, fmt.Errorf("the pages of %s: %w", path, err)
	}
	ours := maps[:0]
	for _, m := range maps {
		if !m.writable && m.inode == st.Ino && m.dev == st.Dev {
			ours = append(ours, m)
		}
	}
	return ours, nil
}

// Refresh reads the file at path into the page cache afresh: what no
// process maps is dropped from the cache (posix_fadvise DONTNEED), then
// the whole file is read back (WILLNEED, in the background). Where the
// page cache holds a file in large folios (ext4 since Linux 6.16 reads a
// file that a starting process maps in them), a fault maps a whole folio,
// and a process at rest maps back far more than what it touches; read
// afresh this way the file is cached in small pages, and a fault maps
// only the 64 KiB around it (fault-around). After Unmap, so that this
// process's own mappings do not keep the old folios. Measured on Linux
// 6.18, ext4: one page touched of a file just written maps 2 MiB
// (TestRefresh); knbox serve at rest with no Service maps back 25 MiB of
// its binary after Unmap alone, 20 MiB after Unmap and Refresh.
func Refresh(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("refresh the page cache of %s: %w", path, err)
	}
	defer f.Close()
	for _, advice := range []int{unix.FADV_DONTNEED, unix.FADV_WILLNEED} {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, advice); err != nil {
			return fmt.Errorf("refresh the page cache of %s: fadvise %d: %w", path, advice, err)
		}
	}
	return nil
}
