// Package agreement holds only tests: that what the API's validation
// (package v1alpha1) accepts, the node's services take, so that a
// NodeConfig that is Accepted can be Applied. It is a package of its own
// so that the services' packages are no test dependency of v1alpha1 (and
// of the modules that import it).
package agreement
