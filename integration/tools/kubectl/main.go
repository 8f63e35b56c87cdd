// Command kubectl is the real kubectl, as k8s.io/kubernetes/cmd/kubectl builds it, from the
// published k8s.io/kubectl module: the harness (integration/src/gitops.rs) writes this file
// into a throw-away module pinned to the control plane's staging version and builds it, so
// tests run `kubectl wait` exactly as users do. It is not part of the Rust workspace.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// Import to initialize client auth plugins.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	// As upstream: the verbosity is set before the command is built, so klog works while
	// kubectl builds its commands and reads its .kuberc.
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		// Pretty-print the error and exit with an error.
		util.CheckErr(err)
	}
}
