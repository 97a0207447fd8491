//go:build corralbench

package main

import "github.com/corralhq/corral/backend/bwrap"

func init() { rootFloor = (*bwrap.Backend).RootFloor }
