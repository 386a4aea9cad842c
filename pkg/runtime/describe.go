package runtime

import "fmt"

// Description says how to make a handler again in another process (a
// pod's shim, which runs its containers): what NewOCI or NewProcess took.
type Description struct {
	// Type is "oci" or "process".
	Type string `json:"type"`
	// OCI is the configuration of an "oci" handler.
	OCI OCIConfig `json:"oci,omitempty"`
	// Root is the state directory of a "process" handler.
	Root string `json:"root,omitempty"`
	// Keep is what NewOCI learnt by asking the binary (`run --help`)
	// whether its run has --keep; nil: not known, asked again. A shim
	// starts on the burst path of every cold instance: one runtime process
	// less to start there.
	Keep *bool `json:"keep,omitempty"`
}

// Describer is implemented by handlers that can be made again from a
// Description.
type Describer interface {
	Describe() Description
}

// FromDescription makes the handler d describes.
func FromDescription(d Description) (Handler, error) {
	switch d.Type {
	case "oci":
		return newOCI(d.OCI, d.Keep)
	case "process":
		if d.Root == "" {
			return nil, fmt.Errorf("process handler: no state root")
		}
		return NewProcess(d.Root), nil
	}
	return nil, fmt.Errorf("handler type %q: want oci or process", d.Type)
}

// Describe describes the handler: its binary as found at NewOCI, its
// absolute state root.
func (h *ociHandler) Describe() Description {
	keep := h.keep
	return Description{Type: "oci", Keep: &keep, OCI: OCIConfig{Name: h.name, Binary: h.bin, Root: h.root, Args: h.args,
		ManageCgroups: h.cgroups != nil, SandboxENOSYS: h.sandboxENOSYS}}
}

// Describe describes the handler.
func (h *processHandler) Describe() Description {
	return Description{Type: "process", Root: h.dir}
}

var (
	_ Describer = (*ociHandler)(nil)
	_ Describer = (*processHandler)(nil)
)
