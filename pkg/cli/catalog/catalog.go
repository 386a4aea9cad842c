// Package catalog decides, before kubectl's command packages initialise,
// whether kubectl's message catalog is loaded in this process.
//
// kubectl's command packages (which pkg/cli reuses) translate their help
// texts while they initialise, and the first translation loads the whole
// catalog: about 350 KB of .po and .mo files zipped and parsed, 10 ms or more
// of every start of the knbox binary, on an idle machine. The shim that knbox
// serve starts for every instance (`knbox shim`, on the cold-start path) and
// the server itself print none of those texts, so for them the catalog is
// not loaded and the texts stay kubectl's English originals. Every other
// command loads it as kubectl does (LC_ALL, LC_MESSAGES, LANG).
//
// It works because Go initialises packages in dependency order and, among
// those ready, by import path: this package needs only kubectl's i18n
// package, and its path sorts before every k8s.io/kubectl command package,
// so its init runs first. It must not import anything more of kubectl.
package catalog

import (
	"os"

	"k8s.io/kubectl/pkg/util/i18n"
)

// untranslated are the knbox commands that never print kubectl's texts.
var untranslated = map[string]bool{"shim": true, "serve": true}

func init() {
	if len(os.Args) > 1 && untranslated[os.Args[1]] {
		// Nothing is bound: kubectl's texts are their English originals.
		_ = i18n.SetLoadTranslationsFunc(func() error { return nil })
	}
}
