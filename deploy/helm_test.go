// Package deploy checks what ships for Kubernetes: the Helm chart in
// helm/sluice (linted, rendered, every object decoded strictly into the
// Kubernetes API types) and the OCI image that cmd/image builds. It is a
// module of its own so that the main module links no Kubernetes or Helm code.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/rules"
)

const chartDir = "helm/sluice"

// TestHelmLint runs helm's own linter (what `helm lint --strict` runs) with
// the default values and with every optional object switched on.
func TestHelmLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"defaults": nil,
		"all on":   allOn(),
	} {
		t.Run(name, func(t *testing.T) {
			l := lint.All(chartDir, vals, "sluice", false)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

func allOn() map[string]any {
	return map[string]any{
		"autoscaling":    map[string]any{"enabled": true},
		"serviceMonitor": map[string]any{"enabled": true},
		"prometheusRule": map[string]any{"enabled": true},
		"secrets": map[string]any{
			"postgresURL": "postgres://sluice@pg/sluice",
			"adminTokens": "ops rw secret-token-0123",
		},
		"postgres": map[string]any{"migrate": true},
	}
}

// objects renders the chart with vals and decodes every object strictly
// (unknown fields are errors) into its Kubernetes API type, keyed by kind.
func objects(t *testing.T, vals map[string]any) map[string]any {
	t.Helper()
	out, err := render(vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	objs := map[string]any{}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") {
			continue
		}
		r := yamlutil.NewYAMLReader(bufio.NewReader(strings.NewReader(out[n])))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			if meta.Kind == "" {
				continue
			}
			obj, ok := typed[meta.APIVersion+"/"+meta.Kind]
			if !ok {
				t.Fatalf("%s: no API type known for %s %s", n, meta.APIVersion, meta.Kind)
			}
			v := obj()
			if err := yaml.UnmarshalStrict(doc, v); err != nil {
				t.Fatalf("%s: %s %s does not decode strictly: %v\n%s", n, meta.APIVersion, meta.Kind, err, doc)
			}
			if _, dup := objs[meta.Kind]; dup {
				t.Fatalf("%s: two objects of kind %s", n, meta.Kind)
			}
			objs[meta.Kind] = v
		}
	}
	return objs
}

// typed maps apiVersion/kind to a new value of its API type. ServiceMonitor
// and PrometheusRule are the Prometheus Operator's; their fields used here
// are typed below, strictly, rather than importing the operator.
var typed = map[string]func() any{
	"apps/v1/Deployment":                      func() any { return new(appsv1.Deployment) },
	"v1/Service":                              func() any { return new(corev1.Service) },
	"v1/ConfigMap":                            func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                               func() any { return new(corev1.Secret) },
	"policy/v1/PodDisruptionBudget":           func() any { return new(policyv1.PodDisruptionBudget) },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(serviceMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return new(prometheusRule) },
}

type objectMeta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

type serviceMonitor struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Record      string            `json:"record"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func render(vals map[string]any) (map[string]string, error) {
	c, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	return renderChart(c, vals)
}

func renderChart(c *chart.Chart, vals map[string]any) (map[string]string, error) {
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{
		Name: "edge", Namespace: "sluice", IsInstall: true, Revision: 1,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(c, rv)
}

func deployment(t *testing.T, objs map[string]any) *appsv1.Deployment {
	t.Helper()
	d, ok := objs["Deployment"].(*appsv1.Deployment)
	if !ok {
		t.Fatalf("no Deployment rendered; got kinds %v", kinds(objs))
	}
	return d
}

func kinds(objs map[string]any) []string {
	var ks []string
	for k := range objs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestChartDefaults: the default render is a Redis fleet of three with
// probes on /healthz and /readyz, rules from a ConfigMap mounted as a
// directory (so the kubelet's symlink swap reaches the watcher), the Redis
// URL from the Secret (never on the command line), non-root, read-only.
func TestChartDefaults(t *testing.T) {
	objs := objects(t, nil)
	if got, want := kinds(objs), []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "Secret", "Service"}; !slices.Equal(got, want) {
		t.Fatalf("kinds = %v, want %v", got, want)
	}
	d := deployment(t, objs)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", d.Spec.Replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe = %+v, want GET %s on port http", p.name, p.probe, p.path)
		}
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"serve", "--rules=/etc/sluice/rules", "--store=redis", "--grpc-addr=:8081", "--http-addr=:8080", "--expected-replicas=3"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "redis://") {
		t.Errorf("args %q carry the Redis URL; want it from the Secret", args)
	}
	if e := envVar(c, "SLUICE_REDIS_URL"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Key != "redis-url" {
		t.Errorf("SLUICE_REDIS_URL = %+v, want from the Secret's redis-url", e)
	}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" {
			t.Errorf("volume %s mounted with subPath %q: ConfigMap and Secret updates would not reach the pod", m.Name, m.SubPath)
		}
	}
	if !mounted(c, "rules", "/etc/sluice/rules") {
		t.Errorf("rules not mounted at /etc/sluice/rules: %+v", c.VolumeMounts)
	}
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Errorf("pod security context %+v: want non-root", ps)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v: want a read-only root and no privilege escalation", sc)
	}
	svc := objs["Service"].(*corev1.Service)
	if len(svc.Spec.Ports) != 2 {
		t.Errorf("service ports = %+v, want grpc and http", svc.Spec.Ports)
	}
	pdb := objs["PodDisruptionBudget"].(*policyv1.PodDisruptionBudget)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable = %v, want 1", pdb.Spec.MaxUnavailable)
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("PDB selects %s=%s, which the pods do not carry", k, v)
		}
	}
}

// TestChartRulesLoad: the rule files the chart ships are valid Sluice rules
// (loaded by the rules package from a directory laid out as the kubelet
// lays out a ConfigMap volume).
func TestChartRulesLoad(t *testing.T) {
	cm := objects(t, nil)["ConfigMap"].(*corev1.ConfigMap)
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_11_26_00_00_00.1")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range cm.Data {
		if err := os.WriteFile(filepath.Join(data, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	s, err := rules.LoadDir(dir, rules.Options{})
	if err != nil {
		t.Fatalf("the chart's rules do not load: %v", err)
	}
	if got := s.Domains(); len(got) == 0 {
		t.Errorf("the chart's rules hold no domain")
	}
}

// TestChartAllOn: HPA, ServiceMonitor and PrometheusRule render and decode;
// the PrometheusRule carries the alerts promtool checks; PostgreSQL and
// admin tokens come from the Secret.
func TestChartAllOn(t *testing.T) {
	objs := objects(t, allOn())
	for _, k := range []string{"HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule"} {
		if objs[k] == nil {
			t.Errorf("%s not rendered", k)
		}
	}
	d := deployment(t, objs)
	if d.Spec.Replicas != nil {
		t.Errorf("replicas = %d with an HPA, want unset", *d.Spec.Replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if e := envVar(c, "SLUICE_POSTGRES_URL"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Errorf("SLUICE_POSTGRES_URL = %+v, want from the Secret", e)
	}
	if !slices.Contains(c.Args, "--admin-token-file=/etc/sluice/admin/tokens") || !mounted(c, "admin-tokens", "/etc/sluice/admin") {
		t.Errorf("admin tokens not mounted and passed: args %v, mounts %+v", c.Args, c.VolumeMounts)
	}
	sec := objs["Secret"].(*corev1.Secret)
	for _, k := range []string{"redis-url", "postgres-url", "admin-tokens"} {
		if sec.StringData[k] == "" {
			t.Errorf("Secret lacks %s", k)
		}
	}
	pr := objs["PrometheusRule"].(*prometheusRule)
	raw, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(pr.Spec.Groups) != len(file.Groups) || len(pr.Spec.Groups) == 0 {
		t.Fatalf("PrometheusRule has %d groups, alerts.yml %d", len(pr.Spec.Groups), len(file.Groups))
	}
	for i, g := range pr.Spec.Groups {
		if len(g.Rules) != len(file.Groups[i].Rules) {
			t.Errorf("group %s: %d rules, alerts.yml has %d", g.Name, len(g.Rules), len(file.Groups[i].Rules))
		}
	}
}

// TestChartExistingSecretAndMemory: an existing Secret is referenced, not
// rendered; the memory store needs no Redis URL.
func TestChartExistingSecretAndMemory(t *testing.T) {
	objs := objects(t, map[string]any{
		"secrets": map[string]any{"existingSecret": "prod-sluice", "existingSecretHasAdminTokens": true},
	})
	if objs["Secret"] != nil {
		t.Errorf("a Secret was rendered beside existingSecret")
	}
	c := deployment(t, objs).Spec.Template.Spec.Containers[0]
	if e := envVar(c, "SLUICE_REDIS_URL"); e == nil || e.ValueFrom.SecretKeyRef.Name != "prod-sluice" {
		t.Errorf("SLUICE_REDIS_URL = %+v, want from prod-sluice", e)
	}
	objs = objects(t, map[string]any{"store": "memory", "secrets": map[string]any{"redisURL": ""}})
	c = deployment(t, objs).Spec.Template.Spec.Containers[0]
	if envVar(c, "SLUICE_REDIS_URL") != nil || !slices.Contains(c.Args, "--store=memory") {
		t.Errorf("memory store: args %v, env %+v", c.Args, c.Env)
	}
}

// TestChartBadValues: a wrong value fails the render with a message naming it.
func TestChartBadValues(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"store": "etcd"}, `at '/store': value must be one of 'memory', 'redis'`},
		{map[string]any{"defaultFailureMode": "maybe"}, `at '/defaultFailureMode'`},
		{map[string]any{"replicaCount": "three"}, `at '/replicaCount'`},
		{map[string]any{"secrets": map[string]any{"redisURL": ""}}, "store redis needs secrets.redisURL"},
		{map[string]any{"replicas": 3}, "replicas"},
	} {
		_, err := render(tc.vals)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("render(%v) error = %v, want one containing %q", tc.vals, err, tc.want)
		}
	}
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func mounted(c corev1.Container, vol, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == vol && m.MountPath == path {
			return true
		}
	}
	return false
}
