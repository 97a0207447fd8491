package egress

// The forwarder and trampoline modes are registered by egress/inside,
// imported here so that every binary able to start an allowlisted sandbox
// can also serve as its helper.
import _ "github.com/corralhq/corral/egress/inside"
