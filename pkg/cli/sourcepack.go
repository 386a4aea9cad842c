package cli

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// IgnoreFile names the files that `knbox deploy --source DIR` leaves out
// of the archive it uploads; without one, DIR/.gitignore is read instead.
const IgnoreFile = ".knboxignore"

// Bounds of an ignore file: it is read whole, and a pattern is matched
// against every path.
const (
	maxIgnoreBytes    = 1 << 20
	maxIgnorePatterns = 10000
)

// ignoreRule is one line of an ignore file.
type ignoreRule struct {
	pattern  string // path.Match pattern, without the leading / or trailing /
	anchored bool   // matches from DIR's root (a / other than a trailing one)
	dirOnly  bool   // a trailing /: matches directories only
	negate   bool   // a leading !: includes what an earlier rule left out
	anyDepth bool   // a leading **/: an anchored pattern may start in any directory
}

// ignoreRules are an ignore file's rules: the last one that matches a path
// decides.
type ignoreRules []ignoreRule

// parseIgnore reads an ignore file in a small subset of .gitignore's
// syntax: blank lines and lines starting with # are skipped; "!" before a
// pattern includes again what an earlier line left out; a trailing "/"
// matches directories only; a pattern with a "/" elsewhere is matched
// against the path from DIR (a leading "/" only anchors it), one without
// against every name at any depth; "*", "?" and "[...]" are path.Match's
// (they do not cross "/"), and a leading "**/" matches any directories. A
// path left out takes everything below it along. what names the file in
// errors.
func parseIgnore(what string, r io.Reader) (ignoreRules, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxIgnoreBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(data) > maxIgnoreBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", what, maxIgnoreBytes)
	}
	var rules ignoreRules
	for n, raw := range strings.Split(string(data), "\n") {
		line := raw
		line = strings.TrimRight(line, " \t\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var rule ignoreRule
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			rule.negate, line = true, rest
		}
		if rest, ok := strings.CutSuffix(line, "/"); ok {
			rule.dirOnly, line = true, rest
		}
		for {
			rest, ok := strings.CutPrefix(line, "**/")
			if !ok {
				break
			}
			rule.anyDepth, line = true, rest
		}
		if rest, ok := strings.CutPrefix(line, "/"); ok {
			rule.anchored, line = true, rest
		}
		rule.anchored = rule.anchored || strings.Contains(line, "/")
		line = path.Clean("/" + line)[1:]
		if line == "" {
			return nil, fmt.Errorf("%s:%d: %q matches nothing", what, n+1, raw)
		}
		if _, err := path.Match(line, ""); err != nil {
			return nil, fmt.Errorf("%s:%d: %q: %v", what, n+1, raw, err)
		}
		if len(rules) == maxIgnorePatterns {
			return nil, fmt.Errorf("%s: more than %d patterns", what, maxIgnorePatterns)
		}
		rule.pattern = line
		rules = append(rules, rule)
	}
	return rules, nil
}

// ignored tells whether rel (slash-separated, relative to DIR) is left out.
func (rs ignoreRules) ignored(rel string, dir bool) bool {
	out := false
	base := path.Base(rel)
	for _, r := range rs {
		if r.dirOnly && !dir {
			continue
		}
		var ok bool
		if r.anchored {
			for p := rel; !ok; {
				ok, _ = path.Match(r.pattern, p)
				_, next, more := strings.Cut(p, "/")
				if !r.anyDepth || !more {
					break
				}
				p = next
			}
		} else {
			ok, _ = path.Match(r.pattern, base)
		}
		if ok {
			out = !r.negate
		}
	}
	return out
}

// readIgnore reads DIR's .knboxignore, else its .gitignore, else nothing.
func readIgnore(dir string) (ignoreRules, string, error) {
	for _, name := range []string{IgnoreFile, ".gitignore"} {
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		rules, err := parseIgnore(filepath.Join(dir, name), f)
		return rules, name, err
	}
	return nil, "", nil
}

// packStats says what an archive holds.
type packStats struct {
	files   int   // regular files and symlinks
	skipped int   // entries left out: ignored, or neither file, directory nor symlink
	bytes   int64 // the regular files' content
}

// packSource writes DIR as a tar.gz archive to w: regular files,
// directories and symlinks (as links) with their permission bits, owned by
// root; .git and what the ignore file names are left out, as are sockets,
// devices and pipes. Paths are relative to DIR, so DIR's content lands in
// /workspace.
func packSource(dir string, w io.Writer) (packStats, error) {
	var st packStats
	rules, _, err := readIgnore(dir)
	if err != nil {
		return st, err
	}
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if (d.IsDir() && d.Name() == ".git") || rules.ignored(rel, d.IsDir()) {
			st.skipped++
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), ModTime: info.ModTime(), Format: tar.FormatPAX}
		switch {
		case d.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		case info.Mode()&fs.ModeSymlink != 0:
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
			hdr.Typeflag = tar.TypeSymlink
		default:
			st.skipped++
			return nil
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			if hdr.Typeflag == tar.TypeSymlink {
				st.files++
			}
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// A file that grew since it was listed is cut at its listed size.
		n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if n != hdr.Size {
			return fmt.Errorf("%s: changed while it was read", p)
		}
		st.files++
		st.bytes += n
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("--source %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return st, err
	}
	return st, zw.Close()
}
