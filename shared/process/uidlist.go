package process

import (
	"fmt"
	"strconv"
	"strings"
)

// UIDList is a flag.Value holding a comma-separated list of uids, such as
// "0,1000".
type UIDList []uint32

// Set replaces the list with the uids in s; an empty s empties it. On error
// the list is left unchanged.
func (l *UIDList) Set(s string) error {
	var uids UIDList
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		uid, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return fmt.Errorf("parse uid list: %w", err)
		}
		uids = append(uids, uint32(uid))
	}
	*l = uids
	return nil
}

// String returns the uids comma-separated.
func (l *UIDList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, uid := range *l {
		parts[i] = strconv.FormatUint(uint64(uid), 10)
	}
	return strings.Join(parts, ",")
}
