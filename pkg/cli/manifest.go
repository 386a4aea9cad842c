package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// Document is one object read from a manifest, or the reason a part of a
// manifest could not be read.
type Document struct {
	Source string // file name, or "stdin"
	Index  int    // 1-based position among the source's non-empty documents
	Line   int    // 1-based line where the document starts
	Item   int    // 1-based position in a List document's items, else 0

	Object *unstructured.Unstructured // nil when Err is set or Skipped
	Err    error
	// Skipped is set for a document that is no Kubernetes object (a
	// mapping with neither apiVersion nor kind, such as knbox's own
	// configuration file): commands pass over it with a note.
	Skipped bool
}

// SkipNote is the note printed for a skipped document.
func (d Document) SkipNote() string {
	return d.Where() + ": skipped: not a Kubernetes object (no apiVersion and kind)"
}

// Where names the document for messages: "svc.yaml: document 2 (line 9)".
func (d Document) Where() string {
	s := fmt.Sprintf("%s: document %d", d.Source, d.Index)
	if d.Item > 0 {
		s += fmt.Sprintf(", item %d", d.Item)
	}
	if d.Line > 0 {
		s += fmt.Sprintf(" (line %d)", d.Line)
	}
	return s
}

// StdinSource is the Source of documents read from standard input.
const StdinSource = "stdin"

// manifestExts are the file name endings read from a directory.
var manifestExts = []string{".yaml", ".yml", ".json"}

// ReadPaths reads every manifest that paths name: files, directories (their
// *.yaml, *.yml and *.json files in name order, and those of their
// subdirectories when recursive) and "-" for stdin. A path that cannot be
// read is an error before any document is returned; a document that cannot
// be parsed is returned with its Err set.
func ReadPaths(paths []string, recursive bool, stdin io.Reader) ([]Document, error) {
	var docs []Document
	readStdin := false
	for _, p := range paths {
		if p == "-" {
			if readStdin {
				return nil, errors.New("stdin (-) can be given only once")
			}
			readStdin = true
			if stdin == nil {
				stdin = strings.NewReader("")
			}
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("read stdin: %w", err)
			}
			docs = append(docs, ReadManifests(StdinSource, data)...)
			continue
		}
		if strings.HasPrefix(p, "http://") || strings.HasPrefix(p, "https://") {
			return nil, fmt.Errorf("%s: knbox reads manifests from files and stdin only; download it first (curl -fsSL %s | knbox apply -f -)", p, p)
		}
		files, err := manifestFiles(p, recursive)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			docs = append(docs, ReadManifests(f, data)...)
		}
	}
	return docs, nil
}

// manifestFiles lists the files p names: p itself, or the manifests of
// directory p (see ReadPaths) in name order.
func manifestFiles(p string, recursive bool) ([]string, error) {
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("the path %q does not exist", p)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case e.IsDir() && path != p && !recursive:
			return filepath.SkipDir
		case !e.IsDir() && slices.Contains(manifestExts, strings.ToLower(filepath.Ext(e.Name()))):
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// chunk is one document's text and the line it starts on.
type chunk struct {
	data []byte
	line int
	json bool // already JSON
}

// ReadManifests splits data (YAML with "---" separators, or a stream of
// JSON objects) into documents. Empty documents are skipped; a List's
// items become documents of their own. Every returned Document either
// holds an object with apiVersion and kind or an Err naming the document.
func ReadManifests(source string, data []byte) []Document {
	var docs []Document
	index := 0
	for _, c := range splitManifest(data) {
		obj, err := decodeChunk(c)
		if err == nil && obj == nil {
			continue // empty document
		}
		index++
		d := Document{Source: source, Index: index, Line: c.line}
		if errors.Is(err, errNotObject) {
			d.Skipped = true
			docs = append(docs, d)
			continue
		}
		if err != nil {
			d.Err = fmt.Errorf("%s: %w", d.Where(), err)
			docs = append(docs, d)
			continue
		}
		docs = append(docs, expandList(d, obj)...)
	}
	return docs
}

// splitManifest cuts data into documents: a JSON stream when it starts
// with '{' and parses as one, else YAML split at "---" lines.
func splitManifest(data []byte) []chunk {
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		if cs, ok := splitJSON(data); ok {
			return cs
		}
	}
	return splitYAML(data)
}

// splitJSON decodes a stream of JSON values. ok is false when not even the
// first value parses (the text is then read as YAML, e.g. a flow mapping).
func splitJSON(data []byte) ([]chunk, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var out []chunk
	for {
		start := skipSpace(data, int(dec.InputOffset()))
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			return out, true
		}
		line := 1 + bytes.Count(data[:start], []byte("\n"))
		if err != nil {
			if len(out) == 0 {
				return nil, false
			}
			// Keep the rest as one document: decoding it reports the error.
			return append(out, chunk{data: data[start:], line: line, json: true}), true
		}
		out = append(out, chunk{data: raw, line: line, json: true})
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && strings.IndexByte(" \t\r\n", data[i]) >= 0 {
		i++
	}
	return i
}

// splitYAML cuts at lines that are "---", optionally followed by blanks or
// a comment.
func splitYAML(data []byte) []chunk {
	var out []chunk
	cur := chunk{line: 1}
	start := 0
	lineNo := 1
	for pos := 0; pos <= len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		next := len(data) + 1
		if end >= 0 {
			end += pos
			next = end + 1
		} else {
			end = len(data)
		}
		if isSeparator(data[pos:end]) {
			cur.data = data[start:pos]
			out = append(out, cur)
			cur = chunk{line: lineNo + 1}
			start = min(next, len(data))
		}
		pos = next
		lineNo++
	}
	cur.data = data[start:]
	return append(out, cur)
}

func isSeparator(line []byte) bool {
	line = bytes.TrimRight(line, "\r")
	if !bytes.HasPrefix(line, []byte("---")) {
		return false
	}
	rest := bytes.TrimLeft(line[3:], " \t")
	return len(rest) == 0 || (len(rest) < len(line[3:]) && rest[0] == '#')
}

// decodeChunk turns one document into an object; nil, nil means empty.
func decodeChunk(c chunk) (map[string]interface{}, error) {
	js := c.data
	if !c.json {
		if len(bytes.TrimSpace(js)) == 0 {
			return nil, nil
		}
		var err error
		js, err = yaml.YAMLToJSON(c.data)
		if err != nil {
			return nil, err
		}
	}
	var v interface{}
	if err := utiljson.Unmarshal(js, &v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	obj, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("a document must be an object with apiVersion and kind, not %s", jsonType(v))
	}
	if err := checkObject(obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// errNotObject marks a mapping with neither apiVersion nor kind.
var errNotObject = errors.New("not a Kubernetes object")

// checkObject verifies what every Kubernetes object needs before it can be
// sent: apiVersion, kind and, when present, an object for metadata.
func checkObject(obj map[string]interface{}) error {
	if obj["apiVersion"] == nil && obj["kind"] == nil {
		return errNotObject
	}
	var missing []string
	for _, k := range []string{"apiVersion", "kind"} {
		switch s, ok := obj[k].(string); {
		case obj[k] == nil:
			missing = append(missing, k)
		case !ok:
			return fmt.Errorf("%s: must be a string, not %s", k, jsonType(obj[k]))
		case s == "":
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: Required value", strings.Join(missing, " and "))
	}
	if md, ok := obj["metadata"]; ok && md != nil {
		m, ok := md.(map[string]interface{})
		if !ok {
			return fmt.Errorf("metadata: must be an object, not %s", jsonType(md))
		}
		for _, k := range []string{"name", "namespace", "generateName", "resourceVersion"} {
			if v, ok := m[k]; ok && v != nil {
				if _, ok := v.(string); !ok {
					return fmt.Errorf("metadata.%s: must be a string, not %s", k, jsonType(v))
				}
			}
		}
		for _, k := range []string{"labels", "annotations"} {
			v, ok := m[k]
			if !ok || v == nil {
				continue
			}
			mm, ok := v.(map[string]interface{})
			if !ok {
				return fmt.Errorf("metadata.%s: must be an object of strings, not %s", k, jsonType(v))
			}
			for key, val := range mm {
				if _, ok := val.(string); !ok {
					return fmt.Errorf("metadata.%s[%s]: must be a string, not %s", k, key, jsonType(val))
				}
			}
		}
	}
	return nil
}

// expandList returns the items of a List document as documents of their
// own, or the document itself.
func expandList(d Document, obj map[string]interface{}) []Document {
	items, isList := obj["items"]
	if !isList || !strings.HasSuffix(obj["kind"].(string), "List") {
		d.Object = &unstructured.Unstructured{Object: obj}
		return []Document{d}
	}
	list, ok := items.([]interface{})
	if !ok && items != nil {
		d.Err = fmt.Errorf("%s: items: must be a list, not %s", d.Where(), jsonType(items))
		return []Document{d}
	}
	out := make([]Document, 0, len(list))
	for i, it := range list {
		di := d
		di.Item = i + 1
		m, ok := it.(map[string]interface{})
		if !ok {
			di.Err = fmt.Errorf("%s: an item must be an object with apiVersion and kind, not %s", di.Where(), jsonType(it))
		} else if err := checkObject(m); errors.Is(err, errNotObject) {
			di.Err = fmt.Errorf("%s: apiVersion and kind: Required value", di.Where())
		} else if err != nil {
			di.Err = fmt.Errorf("%s: %w", di.Where(), err)
		} else {
			di.Object = &unstructured.Unstructured{Object: m}
		}
		out = append(out, di)
	}
	return out
}

func jsonType(v interface{}) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]interface{}:
		return "an object"
	case []interface{}:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}
