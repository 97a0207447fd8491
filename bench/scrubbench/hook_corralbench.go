//go:build corralbench

package main

import "github.com/corralhq/corral/netproxy"

func init() { setScrubbing = (*netproxy.Server).SetScrubbing }
