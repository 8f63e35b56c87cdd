// Command flux-health judges one object with Flux's custom health check expressions
// (a Kustomization's healthCheckExprs entry), evaluated by the code Flux's
// kustomize-controller evaluates them with: github.com/fluxcd/pkg/runtime's
// cel.StatusEvaluator.
//
//	flux-health -current EXPR [-in-progress EXPR] [-failed EXPR] < object.json
//
// It reads one object as JSON on stdin and prints one JSON line {"status": ..., "message": ...}
// (a kstatus status: InProgress, Failed or Current); an error is printed on stderr with exit
// code 1, a usage error with exit code 2.
//
// The harness (integration/src/gitops.rs) writes this file into a throw-away module pinned to
// the version it names and builds it; it is not part of the Rust workspace.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/runtime/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func main() {
	var exprs kustomize.HealthCheckExpressions
	flag.StringVar(&exprs.Current, "current", "", "the `current` expression")
	flag.StringVar(&exprs.InProgress, "in-progress", "", "the `inProgress` expression")
	flag.StringVar(&exprs.Failed, "failed", "", "the `failed` expression")
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(&exprs); err != nil {
		fmt.Fprintln(os.Stderr, "flux-health:", err)
		os.Exit(1)
	}
}

func run(exprs *kustomize.HealthCheckExpressions) error {
	evaluator, err := cel.NewStatusEvaluator(exprs)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fmt.Errorf("reading the object from stdin: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return fmt.Errorf("decoding the object on stdin: %w", err)
	}
	result, err := evaluator.Evaluate(context.Background(), obj)
	if err != nil {
		return fmt.Errorf("evaluating the expressions: %w", err)
	}
	out, err := json.Marshal(map[string]string{
		"status": string(result.Status), "message": result.Message,
	})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}
