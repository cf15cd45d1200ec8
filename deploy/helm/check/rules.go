package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

const componentLabel = "app.kubernetes.io/component"

// Workload is a DaemonSet, Deployment or StatefulSet seen through what the rules need.
type Workload struct {
	*Object
	Selector *metav1.LabelSelector
	Template *corev1.PodTemplateSpec
	Replicas int // -1 for a DaemonSet
}

func (w *Workload) Component() string { return w.Template.Labels[componentLabel] }

// Check runs every rule over the decoded objects.
func Check(objs []*Object, opt Options, p *Problems) {
	seen := map[string]*Object{}
	var workloads []*Workload
	var services []*corev1.Service
	var pdbs []*Object
	secrets := map[string]*corev1.Secret{}
	accounts := map[string]bool{}
	roles := map[string]*rbacv1.Role{}
	var bindings []*Object
	for _, o := range objs {
		checkMeta(o, opt, p)
		key := o.GVK.Kind + "/" + o.Meta.Name
		if prev, dup := seen[key]; dup {
			p.Addf("%s: rendered twice (also %s)", o, prev.Where)
		}
		seen[key] = o
		switch v := o.Obj.(type) {
		case *appsv1.DaemonSet:
			workloads = append(workloads, &Workload{o, v.Spec.Selector, &v.Spec.Template, -1})
		case *appsv1.Deployment:
			workloads = append(workloads, &Workload{o, v.Spec.Selector, &v.Spec.Template, replicas(v.Spec.Replicas)})
		case *appsv1.StatefulSet:
			workloads = append(workloads, &Workload{o, v.Spec.Selector, &v.Spec.Template, replicas(v.Spec.Replicas)})
		case *corev1.Service:
			services = append(services, v)
		case *policyv1.PodDisruptionBudget:
			pdbs = append(pdbs, o)
		case *corev1.Secret:
			secrets[v.Name] = v
		case *corev1.ServiceAccount:
			accounts[v.Name] = true
		case *rbacv1.Role:
			roles[v.Name] = v
			checkRules(o, v.Rules, p)
		case *rbacv1.RoleBinding:
			bindings = append(bindings, o)
		case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
			p.Addf("%s: the chart needs no cluster-wide permission", o)
		}
	}
	for _, b := range bindings {
		rb := b.Obj.(*rbacv1.RoleBinding)
		if rb.RoleRef.Kind != "Role" || roles[rb.RoleRef.Name] == nil {
			p.Addf("%s: binds %s %q, which the chart does not render", b, rb.RoleRef.Kind, rb.RoleRef.Name)
		}
		for _, s := range rb.Subjects {
			if s.Kind != "ServiceAccount" || !accounts[s.Name] || s.Namespace != opt.Namespace {
				p.Addf("%s: subject %s %s/%s is not the chart's ServiceAccount", b, s.Kind, s.Namespace, s.Name)
			}
		}
	}

	byComponent := map[string][]*Workload{}
	for _, w := range workloads {
		checkWorkload(w, accounts, p)
		byComponent[w.Component()] = append(byComponent[w.Component()], w)
	}
	for _, s := range services {
		checkService(s, seen["Service/"+s.Name], workloads, p)
	}
	for _, o := range pdbs {
		checkPDB(o, workloads, p)
	}

	node := one(byComponent["node"], "DaemonSet", "node", opt.Nodes, p)
	gateway := one(byComponent["gateway"], "Deployment", "gateway", opt.Gateways != 0, p)
	etcd := one(byComponent["etcd"], "StatefulSet", "etcd", len(opt.ExternalEtcd) == 0, p)
	// Workloads without containers were reported above; the rules below read container 0.
	for _, w := range []**Workload{&node, &gateway, &etcd} {
		if *w != nil && len((*w).Template.Spec.Containers) == 0 {
			*w = nil
		}
	}
	if len(opt.ExternalEtcd) > 0 && len(byComponent["etcd"]) > 0 {
		p.Addf("etcd is external, yet the chart renders %s", byComponent["etcd"][0])
	}
	secretName, secretKeys := "", map[string]string{}
	if node != nil {
		secretName = checkNode(node, secretKeys, p)
	}
	if gateway != nil {
		checkGateway(gateway, opt, pdbs, p)
	}
	checkSecret(secretName, secretKeys, secrets, opt, p)

	// Node and gateway must reach the same etcd, and it must be the one the chart runs (or
	// the external one asked for).
	var want []string
	if len(opt.ExternalEtcd) > 0 {
		want = opt.ExternalEtcd
	} else if etcd != nil {
		want = etcdEndpoints(etcd, services, opt, p)
	}
	for _, w := range []*Workload{node, gateway} {
		if w == nil {
			continue
		}
		checkFlagsOnce(w, p)
		got, ok := flagValue(w.Template.Spec.Containers[0].Args, "--etcd")
		if !ok {
			p.Addf("%s: spaced gets no --etcd", w)
			continue
		}
		if want != nil && got != strings.Join(want, ",") {
			p.Addf("%s: --etcd %s, but etcd is at %s", w, got, strings.Join(want, ","))
		}
	}
}

func replicas(r *int32) int {
	if r == nil {
		return 1
	}
	return int(*r)
}

// one returns the single workload of a component, reporting a missing or doubled one.
func one(ws []*Workload, kind, component string, expected bool, p *Problems) *Workload {
	if len(ws) == 0 {
		if expected {
			p.Addf("no %s of component %s rendered", kind, component)
		}
		return nil
	}
	if !expected {
		p.Addf("%s rendered, but none was expected", ws[0])
	}
	if len(ws) > 1 {
		p.Addf("%d workloads of component %s (%s, %s)", len(ws), component, ws[0], ws[1])
	}
	if ws[0].GVK.Kind != kind {
		p.Addf("%s: component %s should be a %s", ws[0], component, kind)
	}
	return ws[0]
}

func checkRules(o *Object, rules []rbacv1.PolicyRule, p *Problems) {
	for _, r := range rules {
		for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs} {
			if slices.Contains(list, "*") {
				p.Addf("%s: wildcard in a rule (%v)", o, r)
			}
		}
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				p.Addf("%s: verb %q: the chart grants reading only", o, v)
			}
		}
		if slices.Contains(r.Resources, "secrets") && len(r.ResourceNames) == 0 {
			p.Addf("%s: reads every Secret of the namespace; name the chart's own", o)
		}
	}
}

func checkWorkload(w *Workload, accounts map[string]bool, p *Problems) {
	if w.Selector == nil || (len(w.Selector.MatchLabels) == 0 && len(w.Selector.MatchExpressions) == 0) {
		p.Addf("%s: empty selector", w)
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(w.Selector)
	if err != nil {
		p.Addf("%s: bad selector: %v", w, err)
		return
	}
	checkLabels(w.String()+" pod labels", w.Template.Labels, p)
	if !sel.Matches(labels.Set(w.Template.Labels)) {
		p.Addf("%s: selector %s does not match its pod labels %v", w, sel, w.Template.Labels)
	}
	if w.Component() == "" {
		p.Addf("%s: pods carry no %s label", w, componentLabel)
	}
	spec := &w.Template.Spec
	if sa := spec.ServiceAccountName; sa != "" && len(accounts) > 0 && !accounts[sa] {
		p.Addf("%s: serviceAccountName %q is not rendered", w, sa)
	}
	node := w.GVK.Kind == "DaemonSet" && w.Component() == "node"
	if !node {
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			p.Addf("%s: host namespaces (network %v, pid %v, ipc %v) are for the node DaemonSet only",
				w, spec.HostNetwork, spec.HostPID, spec.HostIPC)
		}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				p.Addf("%s: hostPath volume %s (%s) is for the node DaemonSet only", w, v.Name, v.HostPath.Path)
			}
		}
	}
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		vols[v.Name] = true
	}
	if sts, ok := w.Obj.(*appsv1.StatefulSet); ok {
		for _, c := range sts.Spec.VolumeClaimTemplates {
			vols[c.Name] = true
		}
	}
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	if len(spec.Containers) == 0 {
		p.Addf("%s: no containers", w)
	}
	for i := range all {
		c := &all[i]
		what := fmt.Sprintf("%s container %s", w, c.Name)
		for _, e := range validation.IsDNS1123Label(c.Name) {
			p.Addf("%s: bad name: %s", what, e)
		}
		checkImage(what, c.Image, p)
		checkResources(what, c.Resources, p)
		ports := map[string]bool{}
		for _, cp := range c.Ports {
			if cp.Name != "" {
				for _, e := range validation.IsValidPortName(cp.Name) {
					p.Addf("%s: port name %q: %s", what, cp.Name, e)
				}
				ports[cp.Name] = true
			}
		}
		for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if pr == nil {
				continue
			}
			var port intstrPort
			if pr.HTTPGet != nil {
				port = intstrPort(pr.HTTPGet.Port.String())
			} else if pr.TCPSocket != nil {
				port = intstrPort(pr.TCPSocket.Port.String())
			}
			if port != "" && !port.isNumber() && !ports[string(port)] {
				p.Addf("%s: probe on port %q, which the container does not declare", what, port)
			}
		}
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				p.Addf("%s: mounts volume %q, which the pod does not have", what, m.Name)
			}
			if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional && !node {
				p.Addf("%s: Bidirectional mount propagation is for the node DaemonSet only", what)
			}
		}
		for _, e := range c.Env {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				p.Addf("%s: env %q: %s", what, e.Name, msg)
			}
		}
		if !node {
			if sc := c.SecurityContext; sc != nil {
				if sc.Privileged != nil && *sc.Privileged {
					p.Addf("%s: privileged; only the node DaemonSet may be", what)
				}
				if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
					p.Addf("%s: adds capabilities %v; only the node DaemonSet may", what, sc.Capabilities.Add)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					p.Addf("%s: allowPrivilegeEscalation is not false", what)
				}
			} else {
				p.Addf("%s: no securityContext (allowPrivilegeEscalation must be false)", what)
			}
		}
	}
}

type intstrPort string

func (p intstrPort) isNumber() bool { _, err := strconv.Atoi(string(p)); return err == nil }

// checkImage wants a repository and a tag other than latest (or a digest).
func checkImage(what, image string, p *Problems) {
	if image == "" {
		p.Addf("%s: no image", what)
		return
	}
	ref := image
	if at := strings.Index(ref, "@"); at >= 0 {
		d := ref[at+1:]
		if !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+64 {
			p.Addf("%s: image %s: bad digest", what, image)
		}
		ref = ref[:at]
	}
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash {
		if !strings.Contains(image, "@") {
			p.Addf("%s: image %s has no tag: it floats", what, image)
		}
		return
	}
	if tag := ref[colon+1:]; tag == "" || tag == "latest" {
		p.Addf("%s: image %s is not pinned", what, image)
	}
}

func checkResources(what string, r corev1.ResourceRequirements, p *Problems) {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, ok := r.Requests[name]
		if !ok || q.IsZero() {
			p.Addf("%s: no %s request", what, name)
		}
	}
	lim, ok := r.Limits[corev1.ResourceMemory]
	if !ok || lim.IsZero() {
		p.Addf("%s: no memory limit", what)
	} else if req, ok := r.Requests[corev1.ResourceMemory]; ok && req.Cmp(lim) > 0 {
		p.Addf("%s: memory request %s above its limit %s", what, req.String(), lim.String())
	}
}

// selected lists the workloads whose pods a selector picks.
func selected(sel labels.Selector, workloads []*Workload) []*Workload {
	var out []*Workload
	for _, w := range workloads {
		if sel.Matches(labels.Set(w.Template.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

func checkService(s *corev1.Service, o *Object, workloads []*Workload, p *Problems) {
	if len(s.Spec.Selector) == 0 {
		p.Addf("%s: no selector", o)
		return
	}
	got := selected(labels.SelectorFromSet(s.Spec.Selector), workloads)
	if len(got) != 1 {
		p.Addf("%s: selects the pods of %d workloads, want exactly 1", o, len(got))
		return
	}
	w := got[0]
	names := map[string]int32{}
	for _, c := range w.Template.Spec.Containers {
		for _, cp := range c.Ports {
			names[cp.Name] = cp.ContainerPort
		}
	}
	for _, sp := range s.Spec.Ports {
		t := sp.TargetPort.String()
		if sp.TargetPort.IntVal == 0 && sp.TargetPort.StrVal == "" {
			t = strconv.Itoa(int(sp.Port))
		}
		if _, err := strconv.Atoi(t); err == nil {
			found := false
			for _, v := range names {
				found = found || strconv.Itoa(int(v)) == t
			}
			if !found {
				p.Addf("%s: port %s targets %s, which %s does not declare", o, sp.Name, t, w)
			}
		} else if _, ok := names[t]; !ok {
			p.Addf("%s: port %s targets %q, which %s does not declare", o, sp.Name, t, w)
		}
	}
}

func checkPDB(o *Object, workloads []*Workload, p *Problems) {
	pdb := o.Obj.(*policyv1.PodDisruptionBudget)
	if pdb.Spec.Selector == nil {
		p.Addf("%s: no selector", o)
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || sel.Empty() {
		p.Addf("%s: bad or empty selector", o)
		return
	}
	got := selected(sel, workloads)
	if len(got) != 1 {
		p.Addf("%s: selects the pods of %d workloads, want exactly 1", o, len(got))
		return
	}
	if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
		p.Addf("%s: wants exactly one of minAvailable and maxUnavailable", o)
	}
	if m := pdb.Spec.MinAvailable; m != nil && m.IntVal > 0 && got[0].Replicas >= 0 && int(m.IntVal) >= got[0].Replicas {
		p.Addf("%s: minAvailable %d with %d replicas: no pod of %s could ever be evicted", o, m.IntVal, got[0].Replicas, got[0])
	}
}

// spaced flags that take one value: given twice, one of the two is silently not the one used.
var singleFlags = []string{"--role", "--listen", "--etcd", "--data-dir", "--template-cache", "--node-name",
	"--advertise", "--api-key-file", "--token-keys-file", "--sandbox-domain"}

func checkFlagsOnce(w *Workload, p *Problems) {
	for _, c := range w.Template.Spec.Containers {
		for _, f := range singleFlags {
			n := 0
			for _, a := range c.Args {
				if a == f || strings.HasPrefix(a, f+"=") {
					n++
				}
			}
			if n > 1 {
				p.Addf("%s container %s: %s given %d times", w, c.Name, f, n)
			}
		}
	}
}

// flagValue finds "--name VALUE" or "--name=VALUE" in a container's args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
		if strings.HasPrefix(a, name+"=") {
			return a[len(name)+1:], true
		}
	}
	return "", false
}

func hostPaths(spec *corev1.PodSpec) map[string]string {
	out := map[string]string{} // volume name -> host path
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			out[v.Name] = v.HostPath.Path
		}
	}
	return out
}

// checkNode: the node DaemonSet's privileges, host mounts, identity and credentials. Returns
// the credentials Secret it mounts; keys gets, per credentials flag, the Secret key behind it.
func checkNode(w *Workload, keys map[string]string, p *Problems) string {
	ds := w.Obj.(*appsv1.DaemonSet)
	spec := &w.Template.Spec
	if !spec.HostNetwork || !spec.HostPID {
		p.Addf("%s: needs hostNetwork and hostPID (sandboxes outlive the pod; gateways dial the host)", w)
	}
	if spec.HostNetwork && spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		p.Addf("%s: on the host network, dnsPolicy must be ClusterFirstWithHostNet to resolve cluster names (got %q)", w, spec.DNSPolicy)
	}
	if len(spec.NodeSelector) == 0 {
		p.Addf("%s: no nodeSelector: nodes would land on every machine", w)
	}
	us := ds.Spec.UpdateStrategy
	if us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil ||
		us.RollingUpdate.MaxUnavailable == nil || us.RollingUpdate.MaxUnavailable.String() != "1" {
		p.Addf("%s: updateStrategy must be RollingUpdate with maxUnavailable 1", w)
	} else if s := us.RollingUpdate.MaxSurge; s != nil && s.String() != "0" {
		p.Addf("%s: maxSurge %s: two spaced would share one host's data dir", w, s.String())
	}
	if len(spec.Containers) != 1 {
		p.Addf("%s: want exactly one container (spaced), got %d", w, len(spec.Containers))
		return ""
	}
	c := &spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		p.Addf("%s: spaced must be privileged", w)
	}
	hp := hostPaths(spec)
	mounted := map[string]string{} // host path -> mount path
	for _, m := range c.VolumeMounts {
		if h, ok := hp[m.Name]; ok {
			mounted[h] = m.MountPath
		}
	}
	role, _ := flagValue(c.Args, "--role")
	if role != "node" {
		p.Addf("%s: --role %q, want node", w, role)
	}
	dataDir, _ := flagValue(c.Args, "--data-dir")
	if dataDir == "" {
		p.Addf("%s: no --data-dir", w)
	}
	for _, h := range []string{dataDir, "/sys/fs/cgroup", "/dev/kvm", "/dev/net/tun", "/run"} {
		if h == "" {
			continue
		}
		if mp, ok := mounted[h]; !ok {
			p.Addf("%s: host %s is not mounted", w, h)
		} else if mp != h {
			p.Addf("%s: host %s mounted at %s; spaced records host paths, mount it at the same place", w, h, mp)
		}
	}
	for _, m := range c.VolumeMounts {
		if h := hp[m.Name]; (h == dataDir || h == "/run") && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional) {
			p.Addf("%s: %s needs Bidirectional propagation, or mounts spaced makes die with the container", w, h)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["NODE_NAME"] != "spec.nodeName" || env["HOST_IP"] != "status.hostIP" {
		p.Addf("%s: NODE_NAME and HOST_IP must come from the downward API (spec.nodeName, status.hostIP), got %v", w, env)
	}
	listen, _ := flagValue(c.Args, "--listen")
	port := listen[strings.LastIndex(listen, ":")+1:]
	if name, _ := flagValue(c.Args, "--node-name"); name != "$(NODE_NAME)" {
		p.Addf("%s: --node-name %q, want $(NODE_NAME)", w, name)
	}
	if adv, _ := flagValue(c.Args, "--advertise"); adv != "$(HOST_IP):"+port {
		p.Addf("%s: --advertise %q, want $(HOST_IP):%s (the port of --listen %s)", w, adv, port, listen)
	}
	declared := false
	for _, cp := range c.Ports {
		declared = declared || strconv.Itoa(int(cp.ContainerPort)) == port
	}
	if !declared {
		p.Addf("%s: --listen %s on a port the container does not declare", w, listen)
	}
	for i := 0; i < len(c.Args); i++ {
		if c.Args[i] == "--node-label" {
			if i+1 >= len(c.Args) || !strings.Contains(c.Args[i+1], "=") {
				p.Addf("%s: --node-label wants key=value", w)
			}
		}
	}
	// The credentials: files of one Secret volume.
	secretName := ""
	for _, flagName := range []string{"--api-key-file", "--token-keys-file"} {
		file, ok := flagValue(c.Args, flagName)
		if !ok {
			p.Addf("%s: no %s: nodes must share the operator key and token signing keys", w, flagName)
			continue
		}
		name, key := secretFile(spec, c, file)
		if name == "" {
			p.Addf("%s: %s %s is not a file of a mounted Secret", w, flagName, file)
			continue
		}
		if secretName != "" && secretName != name {
			p.Addf("%s: credentials come from two Secrets (%s, %s)", w, secretName, name)
		}
		secretName = name
		keys[flagName] = key
	}
	return secretName
}

// secretFile finds which Secret (and key) a file path inside a container comes from.
func secretFile(spec *corev1.PodSpec, c *corev1.Container, file string) (string, string) {
	for _, m := range c.VolumeMounts {
		rel := strings.TrimPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if rel == file {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			if len(v.Secret.Items) == 0 {
				return v.Secret.SecretName, path.Clean(rel)
			}
			for _, it := range v.Secret.Items {
				if path.Clean(it.Path) == path.Clean(rel) {
					return v.Secret.SecretName, it.Key
				}
			}
		}
	}
	return "", ""
}

func checkGateway(w *Workload, opt Options, pdbs []*Object, p *Problems) {
	spec := &w.Template.Spec
	if opt.Gateways >= 0 && w.Replicas != opt.Gateways {
		p.Addf("%s: %d replicas, want %d", w, w.Replicas, opt.Gateways)
	}
	if w.Replicas > 1 && (spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil) {
		p.Addf("%s: %d replicas and no pod anti-affinity: they may all land on one machine", w, w.Replicas)
	}
	if a := spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		ok := false
		for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			ok = ok || selectsSelf(t.LabelSelector, w)
		}
		for _, t := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			ok = ok || selectsSelf(t.PodAffinityTerm.LabelSelector, w)
		}
		if !ok {
			p.Addf("%s: its anti-affinity does not select its own pods", w)
		}
	}
	nonRoot := spec.SecurityContext != nil && spec.SecurityContext.RunAsNonRoot != nil && *spec.SecurityContext.RunAsNonRoot
	for _, c := range spec.Containers {
		what := fmt.Sprintf("%s container %s", w, c.Name)
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			p.Addf("%s: root filesystem is not read-only", what)
		}
		if sc != nil && sc.RunAsNonRoot != nil {
			nonRoot = *sc.RunAsNonRoot
		}
		if !nonRoot {
			p.Addf("%s: may run as root (runAsNonRoot unset)", what)
		}
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			p.Addf("%s: does not drop all capabilities", what)
		}
	}
	c := &spec.Containers[0]
	if role, _ := flagValue(c.Args, "--role"); role != "gateway" {
		p.Addf("%s: --role %q, want gateway", w, role)
	}
	for _, pr := range []struct {
		probe *corev1.Probe
		what  string
		path  string
	}{{c.LivenessProbe, "liveness", "/healthz"}, {c.ReadinessProbe, "readiness", "/readyz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path {
			p.Addf("%s: %s probe must be GET %s", w, pr.what, pr.path)
		}
	}
	covered := false
	for _, o := range pdbs {
		pdb := o.Obj.(*policyv1.PodDisruptionBudget)
		if pdb.Spec.Selector != nil && selectsSelf(pdb.Spec.Selector, w) {
			covered = true
		}
	}
	if !covered && w.Replicas > 1 {
		p.Addf("%s: no PodDisruptionBudget selects the gateways", w)
	}
}

func selectsSelf(ls *metav1.LabelSelector, w *Workload) bool {
	if ls == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	return err == nil && !sel.Empty() && sel.Matches(labels.Set(w.Template.Labels))
}

// checkSecret: the credentials Secret is rendered (with usable keys) unless an existing one
// is named, and the nodes mount that one.
func checkSecret(mounted string, keys map[string]string, secrets map[string]*corev1.Secret, opt Options, p *Problems) {
	if opt.ExistingSecret != "" {
		if mounted != "" && mounted != opt.ExistingSecret {
			p.Addf("nodes mount Secret %q, want the existing %q", mounted, opt.ExistingSecret)
		}
		if secrets[opt.ExistingSecret] != nil {
			p.Addf("Secret %s exists already; the chart must not render it", opt.ExistingSecret)
		}
		if len(secrets) > 0 {
			p.Addf("%d Secret(s) rendered although the credentials come from %s", len(secrets), opt.ExistingSecret)
		}
		return
	}
	if mounted == "" {
		return
	}
	s := secrets[mounted]
	if s == nil {
		p.Addf("nodes mount Secret %q, which the chart does not render", mounted)
		return
	}
	get := func(k string) string {
		if v, ok := s.Data[k]; ok {
			return string(v)
		}
		return s.StringData[k]
	}
	if k := strings.TrimSpace(get(keys["--api-key-file"])); len(k) < 16 {
		p.Addf("Secret %s: %s (the --api-key-file) missing or shorter than 16 bytes", s.Name, keys["--api-key-file"])
	}
	var tk struct {
		Keys []struct {
			ID     string `json:"id"`
			Secret string `json:"secret"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(get(keys["--token-keys-file"])), &tk); err != nil || len(tk.Keys) == 0 {
		p.Addf("Secret %s: %s (the --token-keys-file) is not {\"keys\":[...]} with a key (%v)", s.Name, keys["--token-keys-file"], err)
		return
	}
	for _, k := range tk.Keys {
		raw, err := hex.DecodeString(k.Secret)
		if k.ID == "" || strings.Contains(k.ID, ".") || err != nil || len(raw) != 32 {
			p.Addf("Secret %s: token key %q needs an id without '.' and a 32-byte hex secret", s.Name, k.ID)
		}
	}
}

// etcdEndpoints: the client URLs of the bundled members, from the StatefulSet and its
// headless Service; also checks that the members' own flags agree.
func etcdEndpoints(w *Workload, services []*corev1.Service, opt Options, p *Problems) []string {
	sts := w.Obj.(*appsv1.StatefulSet)
	var svc *corev1.Service
	for _, s := range services {
		if s.Name == sts.Spec.ServiceName {
			svc = s
		}
	}
	if svc == nil {
		p.Addf("%s: serviceName %q is not rendered", w, sts.Spec.ServiceName)
		return nil
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		p.Addf("Service %s: etcd's Service must be headless (clusterIP None)", svc.Name)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		p.Addf("Service %s: without publishNotReadyAddresses members cannot find each other to bootstrap", svc.Name)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.Template.Labels)) {
		p.Addf("Service %s does not select the pods of %s", svc.Name, w)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		p.Addf("%s: members must start in parallel (OrderedReady never gets the first one a quorum)", w)
	}
	var clientPort, peerPort int32
	for _, sp := range svc.Spec.Ports {
		switch sp.Name {
		case "client":
			clientPort = sp.Port
		case "peer":
			peerPort = sp.Port
		}
	}
	if clientPort == 0 || peerPort == 0 {
		p.Addf("Service %s: needs ports named client and peer", svc.Name)
		return nil
	}
	domain := fmt.Sprintf("%s.%s.svc.%s", svc.Name, opt.Namespace, opt.ClusterDomain)
	var clients, peers []string
	for i := 0; i < w.Replicas; i++ {
		member := fmt.Sprintf("%s-%d", sts.Name, i)
		clients = append(clients, fmt.Sprintf("http://%s.%s:%d", member, domain, clientPort))
		peers = append(peers, fmt.Sprintf("%s=http://%s.%s:%d", member, member, domain, peerPort))
	}
	if w.Replicas%2 == 0 {
		p.Addf("%s: %d members; an even count tolerates no more failures than one fewer", w, w.Replicas)
	}
	args := w.Template.Spec.Containers[0].Args
	if got, _ := flagValue(args, "--initial-cluster"); got != strings.Join(peers, ",") {
		p.Addf("%s: --initial-cluster %q, want %q", w, got, strings.Join(peers, ","))
	}
	for f, port := range map[string]int32{"--advertise-client-urls": clientPort, "--initial-advertise-peer-urls": peerPort} {
		want := fmt.Sprintf("http://$(POD_NAME).%s:%d", domain, port)
		if got, _ := flagValue(args, f); got != want {
			p.Addf("%s: %s %q, want %q", w, f, got, want)
		}
	}
	for _, f := range []string{"--listen-client-urls", "--listen-peer-urls"} {
		got, _ := flagValue(args, f)
		u, err := url.Parse(got)
		want := clientPort
		if f == "--listen-peer-urls" {
			want = peerPort
		}
		if err != nil || u.Port() != strconv.Itoa(int(want)) {
			p.Addf("%s: %s %q does not listen on port %d", w, f, got, want)
		}
	}
	return clients
}
