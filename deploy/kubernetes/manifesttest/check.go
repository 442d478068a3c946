package manifesttest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// ExportedMetrics are the batchd metrics the manifests may query. They must
// match what daemon/ops exports (batchd_inbox_waiting: input files waiting in
// the source's inbox; batchd_requests_waiting: requests queued for the
// engine): this module does not import the daemon, so a rename there must be
// made here too.
var ExportedMetrics = []string{"batchd_inbox_waiting", "batchd_requests_waiting"}

// The container's port and the daemon's routes the manifests rely on.
const (
	apiPort = 8080
	// DefaultShutdownGrace is shutdown_grace when config.yaml leaves it out.
	DefaultShutdownGrace = 30 * time.Second
)

// Rendered is an overlay's objects, decoded into their API types.
type Rendered struct {
	StatefulSets    []*appsv1.StatefulSet
	Services        []*corev1.Service
	Secrets         []*corev1.Secret
	ConfigMaps      []*corev1.ConfigMap
	PVCs            []*corev1.PersistentVolumeClaim
	PDBs            []*policyv1.PodDisruptionBudget
	Jobs            []*batchv1.Job
	ServiceMonitors []*monitoringv1.ServiceMonitor
	ScaledObjects   []*kedav1alpha1.ScaledObject
}

// decodeStrict decodes js into v, refusing fields v's type does not have.
func decodeStrict(js []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// Decode decodes every object into its API type; an object of a kind not
// listed here, or with a field its type lacks, is an error naming its file.
func Decode(objs []*Object) (*Rendered, error) {
	r := &Rendered{}
	var errs []error
	for _, o := range objs {
		var v any
		switch o.Meta.APIVersion + " " + o.Meta.Kind {
		case "apps/v1 StatefulSet":
			x := new(appsv1.StatefulSet)
			r.StatefulSets, v = append(r.StatefulSets, x), x
		case "v1 Service":
			x := new(corev1.Service)
			r.Services, v = append(r.Services, x), x
		case "v1 Secret":
			x := new(corev1.Secret)
			r.Secrets, v = append(r.Secrets, x), x
		case "v1 ConfigMap":
			x := new(corev1.ConfigMap)
			r.ConfigMaps, v = append(r.ConfigMaps, x), x
		case "v1 PersistentVolumeClaim":
			x := new(corev1.PersistentVolumeClaim)
			r.PVCs, v = append(r.PVCs, x), x
		case "policy/v1 PodDisruptionBudget":
			x := new(policyv1.PodDisruptionBudget)
			r.PDBs, v = append(r.PDBs, x), x
		case "batch/v1 Job":
			x := new(batchv1.Job)
			r.Jobs, v = append(r.Jobs, x), x
		case "monitoring.coreos.com/v1 ServiceMonitor":
			x := new(monitoringv1.ServiceMonitor)
			r.ServiceMonitors, v = append(r.ServiceMonitors, x), x
		case "keda.sh/v1alpha1 ScaledObject":
			x := new(kedav1alpha1.ScaledObject)
			r.ScaledObjects, v = append(r.ScaledObjects, x), x
		default:
			errs = append(errs, fmt.Errorf("%s: kind not known to this check; add its API type", o))
			continue
		}
		if err := decodeStrict(o.JSON, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
		}
	}
	return r, errors.Join(errs...)
}

// Check runs the semantic checks on an overlay's decoded objects.
func Check(r *Rendered) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(r.StatefulSets) != 1 {
		return fmt.Errorf("want one StatefulSet, found %d", len(r.StatefulSets))
	}
	sts := r.StatefulSets[0]
	pod := &sts.Spec.Template
	podLabels := labels.Set(pod.Labels)
	if sts.Spec.Selector == nil || !labels.SelectorFromSet(sts.Spec.Selector.MatchLabels).Matches(podLabels) {
		fail("StatefulSet %s: selector does not match its pod labels", sts.Name)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas < 2 {
		fail("StatefulSet %s: want several replicas on the bucket", sts.Name)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		fail("StatefulSet %s: pod securityContext.runAsNonRoot must be true", sts.Name)
	}

	// The daemon's container: port, probes, read-only root, the data volume.
	if len(pod.Spec.Containers) != 1 {
		fail("StatefulSet %s: want one container, found %d", sts.Name, len(pod.Spec.Containers))
		return errors.Join(errs...)
	}
	c := pod.Spec.Containers[0]
	portName := ""
	for _, p := range c.Ports {
		if p.ContainerPort == apiPort {
			portName = p.Name
		}
	}
	if portName == "" {
		fail("container %s: no port %d", c.Name, apiPort)
	}
	probe := func(what string, p *corev1.Probe, path string) {
		switch {
		case p == nil || p.HTTPGet == nil:
			fail("container %s: %s: want an httpGet probe on %s", c.Name, what, path)
		case p.HTTPGet.Path != path:
			fail("container %s: %s: path %q, want %q", c.Name, what, p.HTTPGet.Path, path)
		case p.HTTPGet.Port.String() != portName && p.HTTPGet.Port.IntValue() != apiPort:
			fail("container %s: %s: port %s is not the API port (%s, %d)", c.Name, what, p.HTTPGet.Port.String(), portName, apiPort)
		}
	}
	probe("livenessProbe", c.LivenessProbe, "/healthz")
	probe("readinessProbe", c.ReadinessProbe, "/readyz")
	if c.StartupProbe != nil {
		probe("startupProbe", c.StartupProbe, "/healthz")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		fail("container %s: want readOnlyRootFilesystem: true and allowPrivilegeEscalation: false", c.Name)
	}
	if c.Resources.Limits.Memory().IsZero() {
		fail("container %s: no memory limit", c.Name)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	claim := false
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Name == "data" && mounts["data"] == "/data" {
			claim = true
		}
	}
	if !claim {
		fail("StatefulSet %s: want a volumeClaimTemplate \"data\" mounted at /data (the ledger, one per pod)", sts.Name)
	}
	for _, v := range pod.Spec.Volumes {
		if _, ok := mounts[v.Name]; !ok {
			fail("StatefulSet %s: volume %q is not mounted", sts.Name, v.Name)
		}
		if v.ConfigMap != nil && !slices.ContainsFunc(r.ConfigMaps, func(cm *corev1.ConfigMap) bool { return cm.Name == v.ConfigMap.Name }) {
			fail("StatefulSet %s: volume %q: no ConfigMap %q", sts.Name, v.Name, v.ConfigMap.Name)
		}
		if v.PersistentVolumeClaim != nil && !slices.ContainsFunc(r.PVCs, func(p *corev1.PersistentVolumeClaim) bool { return p.Name == v.PersistentVolumeClaim.ClaimName }) {
			fail("StatefulSet %s: volume %q: no PersistentVolumeClaim %q", sts.Name, v.Name, v.PersistentVolumeClaim.ClaimName)
		}
	}

	// The grace period outlasts shutdown_grace in the mounted config.
	cfg, err := daemonConfig(r, c)
	if err != nil {
		fail("%v", err)
	} else {
		grace := DefaultShutdownGrace
		if s, ok := cfg["shutdown_grace"].(string); ok {
			if grace, err = time.ParseDuration(s); err != nil {
				fail("config.yaml: shutdown_grace: %v", err)
			}
		}
		if tg := pod.Spec.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second <= grace {
			fail("StatefulSet %s: terminationGracePeriodSeconds must exceed shutdown_grace (%s)", sts.Name, grace)
		}
		if l, _ := cfg["listen"].(string); !strings.HasSuffix(l, fmt.Sprintf(":%d", apiPort)) {
			fail("config.yaml: listen %q is not on port %d", l, apiPort)
		}
	}

	// Every secretKeyRef names a Secret key that exists.
	secretKey := func(where, name, key string) {
		for _, s := range r.Secrets {
			if s.Name == name {
				if _, ok := s.StringData[key]; ok {
					return
				}
				if _, ok := s.Data[key]; ok {
					return
				}
				fail("%s: Secret %q has no key %q", where, name, key)
				return
			}
		}
		fail("%s: no Secret %q", where, name)
	}
	envRefs := func(owner string, spec *corev1.PodSpec) {
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					secretKey(fmt.Sprintf("%s container %s env %s", owner, c.Name, e.Name), e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
				}
			}
		}
	}
	envRefs("StatefulSet "+sts.Name, &pod.Spec)
	for _, j := range r.Jobs {
		envRefs("Job "+j.Name, &j.Spec.Template.Spec)
	}

	// Services: the headless one governs the StatefulSet; all select its pods
	// on its port.
	var apiServices []*corev1.Service
	for _, s := range r.Services {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
			fail("Service %s: selector does not match the StatefulSet's pods", s.Name)
		}
		for _, p := range s.Spec.Ports {
			if p.TargetPort.String() != portName && p.TargetPort.IntValue() != apiPort {
				fail("Service %s: port %s targets %s, not the API port", s.Name, p.Name, p.TargetPort.String())
			}
		}
		if s.Name == sts.Spec.ServiceName && s.Spec.ClusterIP != corev1.ClusterIPNone {
			fail("Service %s: governs StatefulSet %s but is not headless", s.Name, sts.Name)
		}
		if s.Spec.ClusterIP != corev1.ClusterIPNone {
			apiServices = append(apiServices, s)
		}
	}
	if !slices.ContainsFunc(r.Services, func(s *corev1.Service) bool { return s.Name == sts.Spec.ServiceName }) {
		fail("StatefulSet %s: serviceName %q: no such Service", sts.Name, sts.Spec.ServiceName)
	}
	if len(apiServices) != 1 {
		fail("want one (non-headless) Service for the API and the MinIO webhook, found %d", len(apiServices))
	}

	for _, p := range r.PDBs {
		if p.Spec.Selector == nil || !labels.SelectorFromSet(p.Spec.Selector.MatchLabels).Matches(podLabels) {
			fail("PodDisruptionBudget %s: selector does not match the StatefulSet's pods", p.Name)
		}
		if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
			fail("PodDisruptionBudget %s: want maxUnavailable: 1", p.Name)
		}
	}
	if len(r.PDBs) != 1 {
		fail("want one PodDisruptionBudget, found %d", len(r.PDBs))
	}

	// The ServiceMonitor scrapes /metrics on the API Service, with a key.
	if len(r.ServiceMonitors) != 1 {
		fail("want one ServiceMonitor, found %d", len(r.ServiceMonitors))
	}
	for _, sm := range r.ServiceMonitors {
		var matched []*corev1.Service
		for _, s := range r.Services {
			if labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(s.Labels)) {
				matched = append(matched, s)
			}
		}
		if len(matched) != 1 {
			fail("ServiceMonitor %s: selects %d Services, want 1 (the API Service; more would scrape each pod twice)", sm.Name, len(matched))
			continue
		}
		for _, ep := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(matched[0].Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				fail("ServiceMonitor %s: port %q is not a port of Service %s", sm.Name, ep.Port, matched[0].Name)
			}
			if ep.Path != "/metrics" {
				fail("ServiceMonitor %s: path %q, want /metrics", sm.Name, ep.Path)
			}
			if a := ep.Authorization; a == nil || a.Credentials == nil {
				fail("ServiceMonitor %s: no authorization: /metrics needs an API key", sm.Name)
			} else {
				secretKey("ServiceMonitor "+sm.Name, a.Credentials.Name, a.Credentials.Key)
			}
		}
	}

	// KEDA scales this StatefulSet on metrics batchd exports.
	if len(r.ScaledObjects) != 1 {
		fail("want one ScaledObject, found %d", len(r.ScaledObjects))
	}
	for _, so := range r.ScaledObjects {
		ref := so.Spec.ScaleTargetRef
		if ref == nil || ref.Kind != "StatefulSet" || ref.APIVersion != "apps/v1" || ref.Name != sts.Name {
			fail("ScaledObject %s: scaleTargetRef must be apps/v1 StatefulSet %s", so.Name, sts.Name)
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
			fail("ScaledObject %s: minReplicaCount must be at least 1: the metrics come from the daemons", so.Name)
		}
		used := map[string]bool{}
		for _, t := range so.Spec.Triggers {
			if t.Type != "prometheus" {
				fail("ScaledObject %s: trigger %q: type %q, want prometheus", so.Name, t.Name, t.Type)
				continue
			}
			q := t.Metadata["query"]
			names := metricName.FindAllString(q, -1)
			if len(names) == 0 {
				fail("ScaledObject %s: trigger %q: query %q reads no batchd metric", so.Name, t.Name, q)
			}
			for _, n := range names {
				if !slices.Contains(ExportedMetrics, n) {
					fail("ScaledObject %s: trigger %q: batchd does not export %s (it exports %s)", so.Name, t.Name, n, strings.Join(ExportedMetrics, ", "))
				}
				used[n] = true
			}
			if t.Metadata["serverAddress"] == "" || t.Metadata["threshold"] == "" {
				fail("ScaledObject %s: trigger %q: serverAddress and threshold are required", so.Name, t.Name)
			}
		}
		for _, n := range ExportedMetrics {
			if !used[n] {
				fail("ScaledObject %s: no trigger on %s", so.Name, n)
			}
		}
	}

	// MinIO's webhook target: the API Service's /v1/bucket-events, for the
	// bucket and prefix the daemons read.
	if len(r.Jobs) != 1 {
		fail("want one Job (MinIO's webhook target), found %d", len(r.Jobs))
	}
	for _, j := range r.Jobs {
		env := map[string]string{}
		for _, e := range j.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if len(apiServices) == 1 {
			want := fmt.Sprintf("http://%s:%d/v1/bucket-events", apiServices[0].Name, apiPort)
			if env["WEBHOOK_ENDPOINT"] != want {
				fail("Job %s: WEBHOOK_ENDPOINT %q, want %q", j.Name, env["WEBHOOK_ENDPOINT"], want)
			}
		}
		if cfg != nil {
			src, _ := cfg["source"].(string)
			if want := "s3://" + env["BUCKET"] + "/" + env["PREFIX"]; src != want {
				fail("Job %s: BUCKET/PREFIX name %s, but config.yaml's source is %q", j.Name, want, src)
			}
			s3, _ := cfg["s3"].(map[string]any)
			if ep, _ := s3["endpoint"].(string); ep != env["MINIO_URL"] {
				fail("Job %s: MINIO_URL %q, but config.yaml's s3.endpoint is %q", j.Name, env["MINIO_URL"], ep)
			}
			if tok, _ := s3["webhook_token"].(string); tok == "" {
				fail("config.yaml: s3.webhook_token unset: MinIO's target sends the webhook token")
			}
		}
	}
	return errors.Join(errs...)
}

var envRef = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*\}`)

var metricName = regexp.MustCompile(`\bbatchd_[a-z_]+\b`)

// daemonConfig is the config.yaml the container reads (--config FILE),
// from the ConfigMap mounted there.
func daemonConfig(r *Rendered, c corev1.Container) (map[string]any, error) {
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		return nil, fmt.Errorf("container %s: no --config FILE in args %q", c.Name, c.Args)
	}
	file := c.Args[i+1]
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(file, m.MountPath+"/") {
			continue
		}
		for _, v := range r.StatefulSets[0].Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			for _, cm := range r.ConfigMaps {
				if cm.Name != v.ConfigMap.Name {
					continue
				}
				key := strings.TrimPrefix(file, m.MountPath+"/")
				data, ok := cm.Data[key]
				if !ok {
					return nil, fmt.Errorf("ConfigMap %s: no key %q (the container reads %s)", cm.Name, key, file)
				}
				// batchd expands ${VAR} before parsing; any value will do here.
				data = envRef.ReplaceAllString(data, "x")
				var cfg map[string]any
				if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
					return nil, fmt.Errorf("ConfigMap %s: %s: %w", cm.Name, key, err)
				}
				return cfg, nil
			}
		}
	}
	return nil, fmt.Errorf("container %s: %s is not on a ConfigMap volume", c.Name, file)
}
