{{/*
What the values change in deploy/'s objects, after the Kustomize-equivalent
changes of _helpers.tpl. Every default of values.yaml is deploy/'s own value,
so with the defaults this changes nothing but Helm's labels
(tests/test_deploy.py compares the rendering with `kubectl kustomize`).
*/}}

{{/* The labels Helm adds to every object and pod: deploy/'s objects carry
app.kubernetes.io/name and component already. */}}
{{- define "gpuaudit.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/* Every standard label, for a template of the chart's own (not read from
deploy/): include "gpuaudit.labels" (dict "root" $ "component" "monitoring"). */}}
{{- define "gpuaudit.labels" -}}
app.kubernetes.io/name: gpuaudit
app.kubernetes.io/component: {{ .component | quote }}
{{ include "gpuaudit.helmLabels" .root }}
{{- end -}}

{{/* Whether the chart leaves this object out: "true" or "". */}}
{{- define "gpuaudit.omitted" -}}
{{- $v := .root.Values -}}
{{- $obj := .obj -}}
{{- if and (eq $obj.kind "Namespace") (not $v.namespace.create) -}}true
{{- else if and (eq $obj.kind "NetworkPolicy") (not $v.networkPolicy.enabled) -}}true
{{- else if and (eq $obj.kind "PersistentVolumeClaim") (eq $obj.metadata.name "gpuaudit-data") $v.persistence.existingClaim -}}true
{{- else if and (eq $obj.kind "PersistentVolumeClaim") (eq $obj.metadata.name "gpuaudit-samples") $v.nvmlSampler.persistence.existingClaim -}}true
{{- end -}}
{{- end -}}

{{/* A PersistentVolumeClaim's spec and annotations from a persistence value. */}}
{{- define "gpuaudit.claim" -}}
{{- $obj := .obj -}}
{{- $p := .persistence -}}
{{- $_ := set $obj.spec "accessModes" $p.accessModes -}}
{{- $_ := set $obj.spec "resources" (dict "requests" (dict "storage" $p.size)) -}}
{{- if eq $p.storageClass "-" }}{{ $_ := set $obj.spec "storageClassName" "" }}
{{- else if $p.storageClass }}{{ $_ := set $obj.spec "storageClassName" $p.storageClass }}{{ end -}}
{{- if $p.annotations }}{{ $_ := set $obj.metadata "annotations" (merge ($obj.metadata.annotations | default dict) $p.annotations) }}{{ end -}}
{{- end -}}

{{/* The egress rule for the Pushgateway's port (from its URL), or nothing. */}}
{{- define "gpuaudit.pushgatewayEgress" -}}
{{- $url := .Values.pushgateway.url -}}
{{- if $url -}}
{{- $authority := regexReplaceAll "^[A-Za-z][A-Za-z0-9+.-]*://([^/@]*@)?([^/?#]*).*$" $url "${2}" -}}
{{- $port := regexFind "[0-9]+$" (regexFind ":[0-9]+$" $authority) -}}
{{- if not $port }}{{ $port = ternary "443" "80" (hasPrefix "https:" (lower $url)) }}{{ end -}}
{{- toJson (dict "ports" (list (dict "protocol" "TCP" "port" (atoi $port)))) -}}
{{- end -}}
{{- end -}}

{{/* The kubectl image of the PolicyReports job, with policyReports.apply.image. */}}
{{- define "gpuaudit.kubectlImage" -}}
{{- $image := .root.Values.policyReports.apply.image -}}
{{- $pinned := include "gpuaudit.pinned" (dict "root" .root "image" .image) -}}
{{- if or $image.repository $image.tag $image.digest -}}
{{- $bare := regexReplaceAll "@.*$" $pinned "" -}}
{{- $name := regexReplaceAll ":[^:/]+$" $bare "" -}}
{{- $tag := trimPrefix ":" (regexFind ":[^:/]+$" $bare) -}}
{{- printf "%s:%s" ($image.repository | default $name) ($image.tag | default $tag) -}}
{{- if $image.digest }}@{{ $image.digest }}{{ end -}}
{{- else -}}
{{- $pinned -}}
{{- end -}}
{{- end -}}

{{/* Apply the values to one object (changed in place). */}}
{{- define "gpuaudit.applyValues" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $obj := .obj -}}
{{- $name := $obj.metadata.name -}}
{{- $helmLabels := include "gpuaudit.helmLabels" $root | fromYaml -}}
{{- $_ := set $obj.metadata "labels" (merge ($obj.metadata.labels | default dict) $helmLabels) -}}

{{- if and (eq $obj.kind "ServiceAccount") (eq $name "gpuaudit") $v.serviceAccount.annotations -}}
{{- $_ := set $obj.metadata "annotations" (merge ($obj.metadata.annotations | default dict) $v.serviceAccount.annotations) -}}
{{- end -}}

{{- if eq $obj.kind "PersistentVolumeClaim" -}}
{{- if eq $name "gpuaudit-data" }}{{ include "gpuaudit.claim" (dict "obj" $obj "persistence" $v.persistence) }}{{ end -}}
{{- if eq $name "gpuaudit-samples" }}{{ include "gpuaudit.claim" (dict "obj" $obj "persistence" $v.nvmlSampler.persistence) }}{{ end -}}
{{- end -}}

{{- if and (eq $obj.kind "NetworkPolicy") (eq $name "gpuaudit-egress") -}}
{{- $egress := $obj.spec.egress -}}
{{- with include "gpuaudit.pushgatewayEgress" $root }}{{ $egress = append $egress (fromJson .) }}{{ end -}}
{{- $_ := set $obj.spec "egress" (concat $egress (deepCopy $v.networkPolicy.extraEgress)) -}}
{{- end -}}

{{- /* The values of each workload, by its name in deploy/. */ -}}
{{- $workloads := dict
  "gpuaudit-audit" $v.audit
  "gpuaudit-report" $v.report
  "gpuaudit-policyreports" $v.policyReports
  "gpuaudit-policyreports-apply" $v.policyReports.apply
  "gpuaudit-nvml-sampler" $v.nvmlSampler
  "gpuaudit-report-server" $v.reportServer -}}
{{- $workload := get $workloads $name -}}
{{- if eq $obj.kind "CronJob" -}}
{{- if $workload }}{{ $_ := set $obj.spec "schedule" $workload.schedule }}{{ end -}}
{{- $_ := set $obj.spec "timeZone" $v.timeZone -}}
{{- end -}}

{{- if has $obj.kind (list "CronJob" "Deployment" "DaemonSet") -}}
{{- $template := $obj.spec.template -}}
{{- if eq $obj.kind "CronJob" }}{{ $template = $obj.spec.jobTemplate.spec.template }}{{ end -}}
{{- $spec := $template.spec -}}
{{- $meta := $template.metadata -}}
{{- $_ := set $meta "labels" (merge $meta.labels $helmLabels (deepCopy $v.podLabels)) -}}
{{- if $v.podAnnotations }}{{ $_ := set $meta "annotations" (merge ($meta.annotations | default dict) (deepCopy $v.podAnnotations)) }}{{ end -}}
{{- if $v.imagePullSecrets }}{{ $_ := set $spec "imagePullSecrets" (deepCopy $v.imagePullSecrets) }}{{ end -}}
{{- if $v.priorityClassName }}{{ $_ := set $spec "priorityClassName" $v.priorityClassName }}{{ end -}}

{{- /* Placement: the sampler's own (GPU nodes), everyone else's. */ -}}
{{- if eq $name "gpuaudit-nvml-sampler" -}}
{{- $s := $v.nvmlSampler -}}
{{- if $s.nodeSelector }}{{ $_ := set $spec "nodeSelector" (deepCopy $s.nodeSelector) }}{{ else }}{{ $_ := unset $spec "nodeSelector" }}{{ end -}}
{{- if $s.tolerations }}{{ $_ := set $spec "tolerations" (deepCopy $s.tolerations) }}{{ else }}{{ $_ := unset $spec "tolerations" }}{{ end -}}
{{- if $s.affinity }}{{ $_ := set $spec "affinity" (deepCopy $s.affinity) }}{{ end -}}
{{- if $s.runtimeClassName }}{{ $_ := set $spec "runtimeClassName" $s.runtimeClassName }}{{ else }}{{ $_ := unset $spec "runtimeClassName" }}{{ end -}}
{{- else -}}
{{- if $v.nodeSelector }}{{ $_ := set $spec "nodeSelector" (deepCopy $v.nodeSelector) }}{{ end -}}
{{- if $v.tolerations }}{{ $_ := set $spec "tolerations" (deepCopy $v.tolerations) }}{{ end -}}
{{- if $v.affinity }}{{ $_ := set $spec "affinity" (deepCopy $v.affinity) }}{{ end -}}
{{- end -}}

{{- /* Beside the report server, on its node, while the data volume is
ReadWriteOnce (deploy/components/report-server's patch). */ -}}
{{- if and (eq $obj.kind "CronJob") $v.reportServer.enabled (not (has "ReadWriteMany" $v.persistence.accessModes)) -}}
{{- $match := dict "app.kubernetes.io/name" "gpuaudit" "app.kubernetes.io/component" "report-server" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" $match) -}}
{{- $affinity := $spec.affinity | default dict -}}
{{- $podAffinity := $affinity.podAffinity | default dict -}}
{{- $required := $podAffinity.requiredDuringSchedulingIgnoredDuringExecution | default list -}}
{{- $_ := set $podAffinity "requiredDuringSchedulingIgnoredDuringExecution" (append $required $term) -}}
{{- $_ := set $affinity "podAffinity" $podAffinity -}}
{{- $_ := set $spec "affinity" $affinity -}}
{{- end -}}

{{- range $volume := $spec.volumes -}}
{{- with $volume.persistentVolumeClaim -}}
{{- if and (eq .claimName "gpuaudit-data") $v.persistence.existingClaim }}{{ $_ := set . "claimName" $v.persistence.existingClaim }}{{ end -}}
{{- if and (eq .claimName "gpuaudit-samples") $v.nvmlSampler.persistence.existingClaim }}{{ $_ := set . "claimName" $v.nvmlSampler.persistence.existingClaim }}{{ end -}}
{{- end -}}
{{- end -}}

{{- range $c := concat ($spec.initContainers | default list) $spec.containers -}}
{{- if $workload }}{{ $_ := set $c "resources" (deepCopy $workload.resources) }}{{ end -}}
{{- if hasPrefix "registry.k8s.io/kubectl" $c.image -}}
{{- $_ := set $c "image" (include "gpuaudit.kubectlImage" (dict "root" $root "image" $c.image)) -}}
{{- end -}}
{{- /* The containers that run gpuaudit (a script of deploy/), not the report server's http.server. */ -}}
{{- if eq (first ($c.command | default (list ""))) "/bin/sh" -}}
{{- $args := $c.args | default list -}}
{{- $env := $c.env | default list -}}
{{- if has $name (list "gpuaudit-audit" "gpuaudit-report") -}}
{{- if $v.notify.webhook.enabled -}}
{{- $secret := required "notify.webhook.enabled needs notify.webhook.existingSecret: the Secret that holds the webhook URL" $v.notify.webhook.existingSecret -}}
{{- $env = append $env (dict "name" "GPUAUDIT_WEBHOOK_URL" "valueFrom" (dict "secretKeyRef" (dict "name" $secret "key" $v.notify.webhook.secretKey))) -}}
{{- $args = append $args (printf "--webhook-format=%s" $v.notify.webhook.format) -}}
{{- if $v.notify.reportURL }}{{ $args = append $args (printf "--report-url=%s" $v.notify.reportURL) }}{{ end -}}
{{- end -}}
{{- if $v.pushgateway.url }}{{ $args = append $args (printf "--pushgateway=%s" $v.pushgateway.url) }}{{ end -}}
{{- end -}}
{{- if and $workload $workload.extraArgs }}{{ $args = concat $args $workload.extraArgs }}{{ end -}}
{{- if $args }}{{ $_ := set $c "args" $args }}{{ end -}}
{{- $env = concat $env (deepCopy $v.extraEnv) -}}
{{- if $env }}{{ $_ := set $c "env" $env }}{{ end -}}
{{- if $v.envFrom }}{{ $_ := set $c "envFrom" (concat ($c.envFrom | default list) (deepCopy $v.envFrom)) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
