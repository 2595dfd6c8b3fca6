package link

import (
	"crypto/rand"
	"fmt"
	"net"
)

// RandomMAC returns a random locally administered unicast MAC address, as
// the kernel gives a link it creates (a dummy, a macvlan): the MAC a
// created device gets when the claim names none.
func RandomMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return nil, fmt.Errorf("choosing a MAC address: %w", err)
	}
	mac[0] = mac[0]&^0x01 | 0x02
	return mac, nil
}
