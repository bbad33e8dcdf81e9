// Command etcd is upstream's etcd server (go.etcd.io/etcd/server/v3/etcdmain), in a module of its own
// so its dependency versions do not have to agree with Kubernetes'.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
