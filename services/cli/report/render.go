package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// JSON writes v as indented JSON.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table is a tabwriter for kubectl-like columns.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 3, ' ', 0) }

func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// cmpSep is the separator after s: none after nothing.
func cmpSep(s string) string {
	if s == "" {
		return ""
	}
	return "; "
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// NodeTable writes a node's view: its processes, devices and address
// pools, then what could not be read.
func NodeTable(w io.Writer, n Node) error {
	fmt.Fprintf(w, "Node: %s\n", n.Name)
	if n.Pod != "" {
		fmt.Fprintf(w, "Pod: %s\n", n.Pod)
	}
	if n.Driver != "" {
		fmt.Fprintf(w, "Driver: %s\n", n.Driver)
	}
	fmt.Fprintln(w)
	t := table(w)
	row(t, "PROCESS", "HEALTHY", "READY", "RESTARTS", "VERSION", "IMAGE", "DETAIL")
	for _, p := range n.Processes {
		ready := ""
		if p.Ready != nil {
			ready = yesNo(*p.Ready)
		}
		row(t, p.Name, yesNo(p.Healthy), ready, strconv.Itoa(int(p.Restarts)), p.Version, p.Image, oneLine(p.Detail+suffix(cmpSep(p.Detail), p.Error)))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = table(w)
	row(t, "DEVICE", "POOL", "MANAGER", "INTERFACE", "LINK", "PUBLISHED", "TAINTS", "STATE", "CLAIM", "POD", "ATTACHED", "ADDRESSES")
	for _, d := range n.Devices {
		base := []string{d.Name, d.Pool, d.Manager, d.Interface, d.Link, yesNo(d.Published), strings.Join(d.Taints, ","), d.State}
		if len(d.Holders) == 0 {
			row(t, append(base, "", "", "", "")...)
		}
		for _, h := range d.Holders {
			pod := h.Pod
			if pod == "" && h.PodUID != "" {
				pod = "uid " + h.PodUID
			}
			row(t, append(base, h.ClaimNamespace+"/"+h.ClaimName, pod, yesNo(h.Attached), strings.Join(h.Addresses, ","))...)
		}
	}
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = table(w)
	row(t, "IP POOL", "SUBNET", "SIZE", "USED", "FREE", "RETIRED")
	for _, p := range n.IPPools {
		row(t, p.Name, p.Subnet, p.Size, strconv.Itoa(int(p.Used)), p.Free, yesNo(p.Retired))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	for i, p := range n.Problems {
		if i == 0 {
			fmt.Fprintln(w, "\nProblems:")
		}
		fmt.Fprintf(w, "  %s\n", oneLine(p))
	}
	return nil
}

// NodesTable writes a row per node and address pool; a node without
// pools gets one row.
func NodesTable(w io.Writer, ns []NodePools) error {
	t := table(w)
	row(t, "NODE", "DRIVER", "APPLIED", "IP POOL", "SIZE", "USED", "FREE", "LOW")
	for _, n := range ns {
		if len(n.Pools) == 0 {
			row(t, n.Node, n.Driver, n.Applied, "", "", "", "", "")
		}
		for _, p := range n.Pools {
			row(t, n.Node, n.Driver, n.Applied, p.Name, p.Size, strconv.Itoa(int(p.Used)), p.Free, yesNo(p.Low))
		}
	}
	return t.Flush()
}

// ClaimsTable writes a row per claim and reason, the newest reason
// first; a claim without one gets one row.
func ClaimsTable(w io.Writer, cs []Claim) error {
	t := table(w)
	row(t, "NAMESPACE", "CLAIM", "STATE", "NODE", "POD", "DEVICES", "SOURCE", "REASON", "MESSAGE")
	for _, c := range cs {
		base := []string{c.Namespace, c.Name, c.State, c.Node, strings.Join(c.Pods, ","), strings.Join(c.Devices, ",")}
		if len(c.Reasons) == 0 {
			row(t, append(base, "", "", "")...)
		}
		for _, r := range c.Reasons {
			msg := oneLine(r.Message)
			if r.Count > 1 {
				msg = fmt.Sprintf("(x%d) %s", r.Count, msg)
			}
			row(t, append(base, r.Source, r.Reason, msg)...)
		}
	}
	return t.Flush()
}
