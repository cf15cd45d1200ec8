// check: validates the SPACE chart's rendered manifests offline, without an API server.
//
// Every YAML document is decoded strictly (unknown or duplicate fields are errors) into the
// Kubernetes API type its apiVersion/kind names; a kind the chart has no business rendering
// is an error. Then the chart's own rules are checked across objects: selectors match pod
// labels, only the node DaemonSet is privileged or uses host namespaces, the gateway is
// locked down, every container has resources and a pinned image, the etcd endpoints given
// to spaced are the etcd Service's members, the PDB selects the gateways, and more.
//
// Usage: check [flags] RENDERED.yaml...   (exit 0: all good; 1: problems, one per line)
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The kinds the chart may render, each decoded into its own API type.
var kinds = map[schema.GroupVersionKind]func() any{
	{Version: "v1", Kind: "ConfigMap"}:      func() any { return &corev1.ConfigMap{} },
	{Version: "v1", Kind: "Secret"}:         func() any { return &corev1.Secret{} },
	{Version: "v1", Kind: "Service"}:        func() any { return &corev1.Service{} },
	{Version: "v1", Kind: "ServiceAccount"}: func() any { return &corev1.ServiceAccount{} },
	{Group: "apps", Version: "v1", Kind: "DaemonSet"}:   func() any { return &appsv1.DaemonSet{} },
	{Group: "apps", Version: "v1", Kind: "Deployment"}:  func() any { return &appsv1.Deployment{} },
	{Group: "apps", Version: "v1", Kind: "StatefulSet"}: func() any { return &appsv1.StatefulSet{} },
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}:                func() any { return &policyv1.PodDisruptionBudget{} },
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}:               func() any { return &rbacv1.Role{} },
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}:        func() any { return &rbacv1.RoleBinding{} },
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}:        func() any { return &rbacv1.ClusterRole{} },
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"}: func() any { return &rbacv1.ClusterRoleBinding{} },
}

// Object is one decoded document.
type Object struct {
	Where string // file:document
	GVK   schema.GroupVersionKind
	Meta  *metav1.ObjectMeta
	Obj   any
}

func (o *Object) String() string { return fmt.Sprintf("%s %s (%s)", o.GVK.Kind, o.Meta.Name, o.Where) }

// Options: what the caller expects of this rendering.
type Options struct {
	Namespace      string
	ClusterDomain  string
	ExternalEtcd   []string // non-empty: etcd is external with exactly these endpoints
	ExistingSecret string   // non-empty: the credentials Secret is not rendered but named so
	Gateways       int      // expected gateway replicas; -1: any
	Nodes          bool     // a node DaemonSet is expected
}

// Problems collects what is wrong; the checker reports them all, not just the first.
type Problems struct{ list []string }

func (p *Problems) Addf(format string, args ...any) { p.list = append(p.list, fmt.Sprintf(format, args...)) }

func main() {
	var o Options
	var external string
	flag.StringVar(&o.Namespace, "namespace", "space", "namespace the chart was rendered for")
	flag.StringVar(&o.ClusterDomain, "cluster-domain", "cluster.local", "cluster DNS domain of the rendering")
	flag.StringVar(&external, "external-etcd", "", "etcd is external with these comma-separated endpoints")
	flag.StringVar(&o.ExistingSecret, "existing-secret", "", "the credentials come from this existing Secret")
	flag.IntVar(&o.Gateways, "gateways", -1, "expected gateway replicas (-1: any)")
	flag.BoolVar(&o.Nodes, "nodes", true, "a node DaemonSet is expected")
	printArgs := flag.String("print-args", "", "only print the args of this component's first container, one per line")
	secretDir := flag.String("write-secret", "", "only write each key of the rendered Secret to a file (mode 0600) in this directory")
	flag.Parse()
	if external != "" {
		o.ExternalEtcd = strings.Split(external, ",")
	}
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: check [flags] RENDERED.yaml...")
		os.Exit(2)
	}
	var p Problems
	var objs []*Object
	for _, path := range flag.Args() {
		got, err := Load(path, &p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "check: %v\n", err)
			os.Exit(2)
		}
		objs = append(objs, got...)
	}
	if *printArgs != "" {
		os.Exit(PrintArgs(objs, *printArgs))
	}
	if *secretDir != "" {
		os.Exit(WriteSecret(objs, *secretDir))
	}
	Check(objs, o, &p)
	if len(p.list) > 0 {
		for _, s := range p.list {
			fmt.Println("FAIL:", s)
		}
		fmt.Printf("check: %d problem(s) in %d object(s)\n", len(p.list), len(objs))
		os.Exit(1)
	}
	count := map[string]int{}
	for _, ob := range objs {
		count[ob.GVK.Kind]++
	}
	var parts []string
	for k, n := range count {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(parts)
	fmt.Printf("check: ok, %d objects (%s)\n", len(objs), strings.Join(parts, ", "))
}

// PrintArgs prints the args of the first container of the workload whose pods carry
// app.kubernetes.io/component=COMPONENT (to check them against the real binaries' flags).
func PrintArgs(objs []*Object, component string) int {
	for _, o := range objs {
		var t *corev1.PodTemplateSpec
		switch v := o.Obj.(type) {
		case *appsv1.DaemonSet:
			t = &v.Spec.Template
		case *appsv1.Deployment:
			t = &v.Spec.Template
		case *appsv1.StatefulSet:
			t = &v.Spec.Template
		}
		if t != nil && t.Labels[componentLabel] == component && len(t.Spec.Containers) > 0 {
			for _, a := range t.Spec.Containers[0].Args {
				fmt.Println(a)
			}
			return 0
		}
	}
	fmt.Fprintf(os.Stderr, "check: no workload of component %s\n", component)
	return 1
}

// WriteSecret writes the data of the one rendered Secret as files, as the kubelet mounts them.
func WriteSecret(objs []*Object, dir string) int {
	for _, o := range objs {
		if s, ok := o.Obj.(*corev1.Secret); ok {
			for k, v := range s.Data {
				if err := os.WriteFile(dir+"/"+k, v, 0o600); err != nil {
					fmt.Fprintf(os.Stderr, "check: %v\n", err)
					return 1
				}
			}
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "check: no Secret rendered")
	return 1
}

// Load splits a multi-document YAML file and strictly decodes every document.
func Load(path string, p *Problems) ([]*Object, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := k8syaml.NewYAMLReader(bufio.NewReader(f))
	var out []*Object
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, n, err)
		}
		where := fmt.Sprintf("%s:%d", path, n)
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			p.Addf("%s: not YAML: %v", where, err)
			continue
		}
		if len(probe) == 0 {
			continue // only comments (e.g. a template that rendered nothing)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil || tm.APIVersion == "" || tm.Kind == "" {
			p.Addf("%s: no apiVersion/kind", where)
			continue
		}
		gv, err := schema.ParseGroupVersion(tm.APIVersion)
		if err != nil {
			p.Addf("%s: bad apiVersion %q: %v", where, tm.APIVersion, err)
			continue
		}
		gvk := gv.WithKind(tm.Kind)
		mk, ok := kinds[gvk]
		if !ok {
			p.Addf("%s: unknown kind %s %s: the checker knows no API type for it", where, tm.APIVersion, tm.Kind)
			continue
		}
		obj := mk()
		if err := DecodeStrict(doc, obj); err != nil {
			p.Addf("%s: %s does not decode strictly: %v", where, tm.Kind, err)
			continue
		}
		out = append(out, &Object{Where: where, GVK: gvk, Meta: objectMeta(obj), Obj: obj})
	}
	return out, nil
}

// DecodeStrict decodes one YAML document as the API server does with fieldValidation=Strict:
// duplicate keys, unknown fields and fields spelled in another case ("hostpid") are errors
// (plain encoding/json would take the last as hostPID), and so are wrong types.
func DecodeStrict(doc []byte, obj any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return errors.Join(strict...)
	}
	return nil
}

func objectMeta(obj any) *metav1.ObjectMeta {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		return m.GetObjectMeta().(*metav1.ObjectMeta)
	}
	panic(fmt.Sprintf("%T has no ObjectMeta", obj))
}

// checkMeta checks metadata names, labels and namespace of every object.
func checkMeta(o *Object, opt Options, p *Problems) {
	m := o.Meta
	if m.Name == "" {
		p.Addf("%s: no metadata.name", o)
	}
	errs := validation.IsDNS1123Subdomain(m.Name)
	if o.GVK.Kind == "Service" {
		errs = validation.IsDNS1035Label(m.Name)
	}
	for _, e := range errs {
		p.Addf("%s: bad name: %s", o, e)
	}
	cluster := o.GVK.Kind == "ClusterRole" || o.GVK.Kind == "ClusterRoleBinding"
	if !cluster && m.Namespace != opt.Namespace {
		p.Addf("%s: namespace %q, want %q", o, m.Namespace, opt.Namespace)
	}
	checkLabels(o.String()+" metadata.labels", m.Labels, p)
}

func checkLabels(what string, l map[string]string, p *Problems) {
	for k, v := range l {
		for _, e := range validation.IsQualifiedName(k) {
			p.Addf("%s: label key %q: %s", what, k, e)
		}
		for _, e := range validation.IsValidLabelValue(v) {
			p.Addf("%s: label %s value %q: %s", what, k, v, e)
		}
	}
}
