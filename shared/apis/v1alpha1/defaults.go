package v1alpha1

// Default fills spec's unset optional fields with the values the CRD
// defaults them to, for a spec that did not come through the apiserver.
// It changes spec in place and returns it.
func Default(spec *NodeConfigSpec) *NodeConfigSpec {
	if spec.DriverName == "" {
		spec.DriverName = DefaultDriverName
	}
	def := func(p **int32, v int32) {
		if *p == nil {
			*p = &v
		}
	}
	def(&spec.DRARegistrationRetryInterval, DefaultDRARegistrationRetryInterval)
	def(&spec.DRARegistrationTimeout, DefaultDRARegistrationTimeout)
	def(&spec.DRARegistrationMaxAttempts, DefaultDRARegistrationMaxAttempts)
	return spec
}
