package oci

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxID is the largest uid or gid: (uint32)-1 means "no change" to the
// kernel's set*id calls, so it is not an id.
const maxID = 1<<32 - 2

// maxEtcFile bounds how much of /etc/passwd or /etc/group is read.
const maxEtcFile = 4 << 20

// ResolveUser resolves an image's USER ("1000", "1000:1000", "nobody",
// "app:app", "" for root) against the root filesystem's /etc/passwd and
// /etc/group, as Docker and containerd do: a numeric user needs no entry (its
// primary group is then the one /etc/passwd lists, else 0), a name must be
// listed; a group given after the colon replaces the primary group, and must
// be listed if it is a name. additionalGids are the groups of /etc/group that
// list the user by name. The files are read inside rootfs: symlinks in the
// image cannot point them at the host's files.
func ResolveUser(rootfs, user string) (uid, gid uint32, additionalGids []uint32, err error) {
	r, err := (&userDB{root: rootfs}).resolve(user)
	if err != nil {
		return 0, 0, nil, err
	}
	return r.uid, r.gid, r.groups, nil
}

type passwdEntry struct {
	name     string
	uid, gid uint32
	home     string
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

// userDB reads the root filesystem's /etc/passwd and /etc/group once each,
// when first needed.
type userDB struct {
	root                   string
	passwd                 []passwdEntry
	group                  []groupEntry
	passwdRead, groupRead  bool
	passwdErr, groupErr    error
	noPasswd, noGroupsFile bool
}

func (db *userDB) users() ([]passwdEntry, error) {
	if !db.passwdRead {
		db.passwdRead = true
		b, err := readInRoot(db.root, "etc/passwd")
		switch {
		case errors.Is(err, os.ErrNotExist):
			db.noPasswd = true
		case err != nil:
			db.passwdErr = err
		default:
			db.passwd = parsePasswd(string(b))
		}
	}
	return db.passwd, db.passwdErr
}

func (db *userDB) groups() ([]groupEntry, error) {
	if !db.groupRead {
		db.groupRead = true
		b, err := readInRoot(db.root, "etc/group")
		switch {
		case errors.Is(err, os.ErrNotExist):
			db.noGroupsFile = true
		case err != nil:
			db.groupErr = err
		default:
			db.group = parseGroup(string(b))
		}
	}
	return db.group, db.groupErr
}

// userByID returns the first /etc/passwd entry for uid, or nil.
func (db *userDB) userByID(uid uint32) (*passwdEntry, error) {
	users, err := db.users()
	if err != nil {
		return nil, err
	}
	for i := range users {
		if users[i].uid == uid {
			return &users[i], nil
		}
	}
	return nil, nil
}

// groupsOf returns the gids of the groups that list name as a member.
func (db *userDB) groupsOf(name string) ([]uint32, error) {
	groups, err := db.groups()
	if err != nil {
		return nil, err
	}
	var gids []uint32
	for _, g := range groups {
		for _, m := range g.members {
			if m == name {
				gids = append(gids, g.gid)
				break
			}
		}
	}
	return gids, nil
}

type resolvedUser struct {
	uid, gid uint32
	name     string // "" if /etc/passwd does not list the user
	home     string
	groups   []uint32
}

// resolve implements ResolveUser.
func (db *userDB) resolve(spec string) (resolvedUser, error) {
	var r resolvedUser
	spec = strings.TrimSpace(spec)
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" {
		if hasGroup {
			return r, fmt.Errorf("user %q: no user before the colon", spec)
		}
		userPart = "0"
	}
	if hasGroup && groupPart == "" {
		return r, fmt.Errorf("user %q: no group after the colon", spec)
	}

	if id, ok := parseID(userPart); ok {
		r.uid = id
		pw, err := db.userByID(id)
		if err != nil {
			return r, err
		}
		if pw != nil {
			r.gid, r.name, r.home = pw.gid, pw.name, pw.home
		}
	} else {
		users, err := db.users()
		if err != nil {
			return r, err
		}
		if db.noPasswd {
			return r, fmt.Errorf("user %q: the image has no /etc/passwd", userPart)
		}
		found := false
		for _, pw := range users {
			if pw.name == userPart {
				r.uid, r.gid, r.name, r.home, found = pw.uid, pw.gid, pw.name, pw.home, true
				break
			}
		}
		if !found {
			return r, fmt.Errorf("user %q: %w in the image's /etc/passwd", userPart, errNotFound)
		}
	}

	if hasGroup {
		if id, ok := parseID(groupPart); ok {
			r.gid = id
		} else {
			groups, err := db.groups()
			if err != nil {
				return r, err
			}
			if db.noGroupsFile {
				return r, fmt.Errorf("group %q: the image has no /etc/group", groupPart)
			}
			found := false
			for _, g := range groups {
				if g.name == groupPart {
					r.gid, found = g.gid, true
					break
				}
			}
			if !found {
				return r, fmt.Errorf("group %q: %w in the image's /etc/group", groupPart, errNotFound)
			}
		}
	}

	if r.name != "" {
		g, err := db.groupsOf(r.name)
		if err != nil {
			return r, err
		}
		r.groups = g
	}
	if r.home == "" {
		r.home = "/"
	}
	return r, nil
}

// parseID parses a decimal uid or gid.
func parseID(s string) (uint32, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > maxID {
		return 0, false
	}
	return uint32(n), true
}

// parsePasswd parses /etc/passwd lines "name:password:uid:gid:gecos:home:shell".
// Lines it cannot read are skipped, as libc does.
func parsePasswd(s string) []passwdEntry {
	var out []passwdEntry
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 4 || f[0] == "" {
			continue
		}
		uid, ok1 := parseID(f[2])
		gid, ok2 := parseID(f[3])
		if !ok1 || !ok2 {
			continue
		}
		e := passwdEntry{name: f[0], uid: uid, gid: gid}
		if len(f) > 5 {
			e.home = f[5]
		}
		out = append(out, e)
	}
	return out
}

// parseGroup parses /etc/group lines "name:password:gid:member,member".
func parseGroup(s string) []groupEntry {
	var out []groupEntry
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 3 || f[0] == "" {
			continue
		}
		gid, ok := parseID(f[2])
		if !ok {
			continue
		}
		e := groupEntry{name: f[0], gid: gid}
		if len(f) > 3 {
			for _, m := range strings.Split(f[3], ",") {
				if m = strings.TrimSpace(m); m != "" {
					e.members = append(e.members, m)
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// openInRoot opens name (relative) inside root with openat2's
// RESOLVE_IN_ROOT: ".." and absolute symlinks stop at root, as if root were
// "/", so nothing outside root can be reached. Linux 5.6 or later.
func openInRoot(root, name string, flags int) (*os.File, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	flags |= unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NOCTTY // with O_PATH, openat2 refuses any other flag
	}
	how := unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 16 { // EAGAIN: a concurrent rename; retry a bounded number of times
		fd, err := unix.Openat2(dir, name, &how)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), root+"/"+name), nil
		case err == unix.EAGAIN || err == unix.EINTR:
			continue
		case err == unix.ENOSYS:
			return nil, fmt.Errorf("open %s in %s: openat2 needs Linux 5.6 or later: %w", name, root, err)
		default:
			return nil, &os.PathError{Op: "open", Path: root + "/" + name, Err: err}
		}
	}
	return nil, &os.PathError{Op: "open", Path: root + "/" + name, Err: unix.EAGAIN}
}

// readInRoot reads a regular file inside root (see openInRoot), at most
// maxEtcFile bytes.
func readInRoot(root, name string) ([]byte, error) {
	f, err := openInRoot(root, name, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("/%s in the image is not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxEtcFile+1))
	if err != nil {
		return nil, fmt.Errorf("read /%s in the image: %w", name, err)
	}
	if len(b) > maxEtcFile {
		return nil, fmt.Errorf("/%s in the image is larger than %d bytes", name, maxEtcFile)
	}
	return b, nil
}

// resolveInRoot resolves name (relative) inside root, symlinks included, and
// returns the resulting host path, which is root itself or below it.
func resolveInRoot(root, name string) (string, error) {
	f, err := openInRoot(root, name, unix.O_PATH)
	if err != nil {
		return "", err
	}
	defer f.Close()
	rf, err := os.Open(root)
	if err != nil {
		return "", err
	}
	defer rf.Close()
	realRoot, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", rf.Fd()))
	if err != nil {
		return "", err
	}
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return "", err
	}
	if p != realRoot && !strings.HasPrefix(p, strings.TrimSuffix(realRoot, "/")+"/") {
		return "", fmt.Errorf("%s resolves to %s, outside %s", name, p, realRoot)
	}
	return p, nil
}
