package dummy

import "errors"

// ErrNotDummy means a link of the device's name exists in the host network
// namespace and is not a dummy link: Setup neither adopts nor replaces it.
var ErrNotDummy = errors.New("not a dummy link, so not adopted")
