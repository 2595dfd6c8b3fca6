package report

import (
	"cmp"
	"math/big"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// Low is when an address pool is low: fewer than MinFree addresses free,
// or less than MinFreePercent of its size.
type Low struct {
	MinFree        int64
	MinFreePercent float64
}

// NodePools is a node's address pools as dra counts them in its
// NodeConfig's status.
type NodePools struct {
	Node   string `json:"node"`
	Driver string `json:"driver,omitempty"`
	// Applied is the NodeConfig's Applied condition: its status, and the
	// reason when not True.
	Applied string    `json:"applied"`
	Pools   []PoolUse `json:"pools"`
	// Low says one of its pools is low.
	Low bool `json:"low"`
}

// PoolUse is one address pool's use.
type PoolUse struct {
	Name string `json:"name"`
	Size string `json:"size"`
	Used int32  `json:"used"`
	Free string `json:"free"`
	Low  bool   `json:"low"`
}

// BuildNodes reports each NodeConfig's address pools, the nodes with a low
// pool first.
func BuildNodes(ncs []v1alpha1.NodeConfig, low Low) []NodePools {
	out := make([]NodePools, 0, len(ncs))
	for _, nc := range ncs {
		n := NodePools{Node: nc.Name, Driver: cmp.Or(nc.Status.DriverName, nc.Spec.DriverName), Applied: "Unknown"}
		if c := findCondition(nc.Status.Conditions, "Applied"); c != nil {
			n.Applied = string(c.Status)
			if c.Status != metav1.ConditionTrue && c.Reason != "" {
				n.Applied += " (" + c.Reason + ")"
			}
		}
		for _, p := range nc.Status.IPPools {
			u := PoolUse{Name: p.Name, Size: p.Size, Used: p.Used, Free: p.Free, Low: low.is(p.Size, p.Free)}
			n.Low = n.Low || u.Low
			n.Pools = append(n.Pools, u)
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b NodePools) int {
		if a.Low != b.Low {
			if a.Low {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Node, b.Node)
	})
	return out
}

// is says a pool of size addresses with free of them free is low. Sizes
// are decimal strings (an IPv6 range exceeds 64 bits); one that does not
// parse is not judged.
func (l Low) is(size, free string) bool {
	s, ok1 := new(big.Int).SetString(size, 10)
	f, ok2 := new(big.Int).SetString(free, 10)
	if !ok1 || !ok2 {
		return false
	}
	if f.Cmp(big.NewInt(l.MinFree)) < 0 {
		return true
	}
	if s.Sign() == 0 {
		return false
	}
	pct, _ := new(big.Rat).SetFrac(new(big.Int).Mul(f, big.NewInt(100)), s).Float64()
	return pct < l.MinFreePercent
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
