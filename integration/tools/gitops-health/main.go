// Command gitops-health computes what GitOps engines read from one Kubernetes object, with
// their own libraries, so tests assert the engines' verdicts rather than our reading of them.
//
//	gitops-health kstatus              < object.json
//	gitops-health argo-health <script> < object.json
//
// Both read one object as JSON on stdin and print one JSON line {"status": ..., "message": ...}
// on stdout; an error is printed on stderr with exit code 1, a usage error with exit code 2.
//
// kstatus is sigs.k8s.io/cli-utils' pkg/kstatus/status.Compute: what Flux's health checks,
// cli-utils and `kubectl wait` users read. argo-health runs an Argo CD resource health Lua
// script the way Argo CD's util/lua does for a script from argocd-cm: gopher-lua with only the
// package, base and table libraries and a safe os (time and date), a one-second deadline, the
// object as the global `obj` (maps as tables, lists as arrays, every number a Lua number),
// and the script's returned table read as a health status; a status Argo CD does not know
// becomes Unknown with Argo CD's message.
//
// The harness (integration/src/gitops.rs) writes this file into a throw-away module pinned to
// the versions it names and builds it; it is not part of the Rust workspace.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// verdict is what both subcommands print.
type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// argoHealthStatuses are the health codes Argo CD accepts from a script
// (gitops-engine's HealthStatusCode values).
var argoHealthStatuses = map[string]bool{
	"Unknown": true, "Progressing": true, "Suspended": true,
	"Healthy": true, "Degraded": true, "Missing": true,
}

// argoInvalidHealthStatus is Argo CD's message for a status it does not know.
const argoInvalidHealthStatus = "Lua returned an invalid health status"

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	obj, err := readObject(os.Stdin)
	if err != nil {
		fail(err)
	}
	var v verdict
	switch os.Args[1] {
	case "kstatus":
		v, err = kstatus(obj)
	case "argo-health":
		if len(os.Args) != 3 {
			usage()
		}
		v, err = argoHealth(obj, os.Args[2])
	default:
		usage()
	}
	if err != nil {
		fail(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: gitops-health kstatus < object.json\n"+
		"       gitops-health argo-health <script.lua> < object.json")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gitops-health:", err)
	os.Exit(1)
}

// readObject decodes the object the way client-go decodes one from the API server:
// integers become int64, as in the objects Argo CD and kstatus are given.
func readObject(r io.Reader) (*unstructured.Unstructured, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading the object from stdin: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("decoding the object on stdin: %w", err)
	}
	return u, nil
}

func kstatus(obj *unstructured.Unstructured) (verdict, error) {
	result, err := status.Compute(obj)
	if err != nil {
		return verdict{}, fmt.Errorf("kstatus: %w", err)
	}
	return verdict{Status: string(result.Status), Message: result.Message}, nil
}

func argoHealth(obj *unstructured.Unstructured, scriptPath string) (verdict, error) {
	script, err := os.ReadFile(scriptPath)
	if err != nil {
		return verdict{}, fmt.Errorf("reading the health script: %w", err)
	}
	l, err := newArgoState()
	if err != nil {
		return verdict{}, err
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj.Object))
	if err := l.DoString(string(script)); err != nil {
		return verdict{}, fmt.Errorf("%s: %w", scriptPath, err)
	}
	returned, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return verdict{}, fmt.Errorf("expect table output from Lua script, not %s", l.Get(-1).Type())
	}
	var v verdict
	for field, into := range map[string]*string{"status": &v.Status, "message": &v.Message} {
		if *into, err = luaString(returned, field); err != nil {
			return verdict{}, err
		}
	}
	if !argoHealthStatuses[v.Status] {
		return verdict{Status: "Unknown", Message: argoInvalidHealthStatus}, nil
	}
	return v, nil
}

// newArgoState opens what Argo CD opens for a health script from argocd-cm (without
// `useOpenLibs`): package, base, table, and an os library holding only time and date.
func newArgoState() (*lua.LState, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.OsLibName, lua.OpenOs},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true},
			lua.LString(lib.name)); err != nil {
			l.Close()
			return nil, fmt.Errorf("opening the Lua %s library: %w", lib.name, err)
		}
	}
	full, ok := l.GetGlobal(lua.OsLibName).(*lua.LTable)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("the Lua os library did not open")
	}
	safe := l.NewTable()
	for _, name := range []string{"time", "date"} {
		safe.RawSetString(name, full.RawGetString(name))
	}
	l.SetGlobal(lua.OsLibName, safe)
	l.PreloadModule(lua.OsLibName, func(l *lua.LState) int {
		l.Push(safe)
		return 1
	})
	return l, nil
}

// toLua converts a decoded object as Argo CD's decodeValue does.
func toLua(l *lua.LState, value interface{}) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case json.Number:
		return lua.LString(v)
	case string:
		return lua.LString(v)
	case []interface{}:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(toLua(l, item))
		}
		return arr
	case map[string]interface{}:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), toLua(l, item))
		}
		return tbl
	}
	return lua.LNil
}

// luaString reads one field of the returned table as Argo CD's JSON round trip does into a
// string field: a string as it is, nil as empty, anything else an error.
func luaString(returned *lua.LTable, field string) (string, error) {
	switch v := returned.RawGetString(field).(type) {
	case lua.LString:
		return string(v), nil
	case *lua.LNilType:
		return "", nil
	default:
		return "", fmt.Errorf("the returned table's %s is a Lua %s, not a string", field, v.Type())
	}
}
