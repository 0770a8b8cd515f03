package redis

import "runtime"

var runtimeProcs = runtime.GOMAXPROCS(0)
