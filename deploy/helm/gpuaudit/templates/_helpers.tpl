{{/*
The chart renders deploy/'s own manifests (files/base and files/components are
links to deploy/base and deploy/components), changing only what Kustomize
changes: the namespace, the image, and each enabled component's patches; then
what the values change (templates/_values.tpl), whose defaults are deploy/'s
own. With the defaults, any difference from `kubectl kustomize` but Helm's
labels is a bug (tests/test_deploy.py).
*/}}

{{/* The enabled components, in the order their patches apply. */}}
{{- define "gpuaudit.components" -}}
{{- $on := list -}}
{{- if .Values.policyReports.enabled }}{{ $on = append $on "policyreports" }}{{ end -}}
{{- if .Values.nvmlSampler.enabled }}{{ $on = append $on "nvml-sampler" }}{{ end -}}
{{- if .Values.mlOperators.enabled }}{{ $on = append $on "ml-operators" }}{{ end -}}
{{- if .Values.reportServer.enabled }}{{ $on = append $on "report-server" }}{{ end -}}
{{- toJson $on -}}
{{- end -}}

{{/*
The gpuaudit image. With the default repository and tag, the digest
deploy/components/images pins (once a release fills it), as Kustomize does;
image.digest pins any other.
*/}}
{{- define "gpuaudit.image" -}}
{{- $digest := .Values.image.digest -}}
{{- if and (not $digest) (eq .Values.image.repository "gpuaudit") (not .Values.image.tag) -}}
{{- range $entry := include "gpuaudit.images" . | fromJsonArray -}}
{{- if eq $entry.name "gpuaudit" }}{{ $digest = $entry.digest | default "" }}{{ end -}}
{{- end -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- if $digest }}@{{ $digest }}{{ end -}}
{{- end -}}

{{/* Every image deploy/ runs, as deploy/components/images lists them. */}}
{{- define "gpuaudit.images" -}}
{{- $component := fromYaml (.Files.Get "files/components/images/kustomization.yaml") -}}
{{- toJson ($component.images | default list) -}}
{{- end -}}

{{/* Another image, changed as Kustomize's images: transformer changes it. */}}
{{- define "gpuaudit.pinned" -}}
{{- $bare := regexReplaceAll "@.*$" .image "" -}}
{{- $name := regexReplaceAll ":[^:/]+$" $bare "" -}}
{{- $tag := trimPrefix ":" (regexFind ":[^:/]+$" $bare) -}}
{{- $out := .image -}}
{{- range $entry := include "gpuaudit.images" .root | fromJsonArray -}}
{{- if eq $entry.name $name -}}
{{- $out = $entry.newName | default $name -}}
{{- $newTag := $entry.newTag | default $tag -}}
{{- if $newTag }}{{ $out = printf "%s:%s" $out $newTag }}{{ end -}}
{{- if $entry.digest }}{{ $out = printf "%s@%s" $out $entry.digest }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $out -}}
{{- end -}}

{{/* The YAML documents of one file, as a JSON list of objects. */}}
{{- define "gpuaudit.read" -}}
{{- $objects := list -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" (.root.Files.Get .path) -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj (hasKey $obj "kind") -}}
{{- $objects = append $objects $obj -}}
{{- end -}}
{{- end -}}
{{- toJson $objects -}}
{{- end -}}

{{/* The pod spec of a workload, or nothing. */}}
{{- define "gpuaudit.podSpec" -}}
{{- if eq .kind "CronJob" -}}{{ toJson .spec.jobTemplate.spec.template.spec }}
{{- else if has .kind (list "Deployment" "DaemonSet" "StatefulSet") -}}{{ toJson .spec.template.spec }}
{{- end -}}
{{- end -}}

{{/* One object as Kustomize would leave it, as a YAML document. */}}
{{- define "gpuaudit.emit" -}}
{{- $root := .root -}}
{{- $obj := .obj -}}
{{- $ns := $root.Values.namespace.name -}}
{{- $on := include "gpuaudit.components" $root | fromJsonArray -}}
{{- $cluster := list "Namespace" "ClusterRole" "ClusterRoleBinding" -}}
{{- if eq $obj.kind "Namespace" -}}
{{- $_ := set $obj.metadata "name" $ns -}}
{{- if has "nvml-sampler" $on -}}
{{- $labels := $obj.metadata.labels -}}
{{- $_ := set $labels "pod-security.kubernetes.io/enforce" "privileged" -}}
{{- $_ := set $labels "pod-security.kubernetes.io/warn" "restricted" -}}
{{- $_ := set $labels "pod-security.kubernetes.io/audit" "restricted" -}}
{{- end -}}
{{- else if not (has $obj.kind $cluster) -}}
{{- $_ := set $obj.metadata "namespace" $ns -}}
{{- end -}}
{{- range $subject := $obj.subjects | default list -}}
{{- if eq $subject.kind "ServiceAccount" -}}{{- $_ := set $subject "namespace" $ns -}}{{- end -}}
{{- end -}}
{{- $specJson := include "gpuaudit.podSpec" $obj -}}
{{- if $specJson -}}
{{- $spec := dict -}}
{{- if eq $obj.kind "CronJob" }}{{ $spec = $obj.spec.jobTemplate.spec.template.spec }}{{ else }}{{ $spec = $obj.spec.template.spec }}{{ end -}}
{{- range $c := concat ($spec.initContainers | default list) $spec.containers -}}
{{- if hasPrefix "gpuaudit:" $c.image -}}
{{- $_ := set $c "image" (include "gpuaudit.image" $root) -}}
{{- if $root.Values.image.pullPolicy }}{{ $_ := set $c "imagePullPolicy" $root.Values.image.pullPolicy }}{{ end -}}
{{- else -}}
{{- $_ := set $c "image" (include "gpuaudit.pinned" (dict "root" $root "image" $c.image)) -}}
{{- end -}}
{{- end -}}
{{- if and (eq $obj.kind "CronJob") (eq $obj.metadata.name "gpuaudit-audit") (has "nvml-sampler" $on) -}}
{{- $_ := set $spec "volumes" (append $spec.volumes (dict "name" "samples" "persistentVolumeClaim" (dict "claimName" "gpuaudit-samples" "readOnly" true))) -}}
{{- $audit := index $spec.containers 0 -}}
{{- $_ := set $audit "volumeMounts" (append $audit.volumeMounts (dict "name" "samples" "mountPath" "/samples" "readOnly" true)) -}}
{{- end -}}
{{- end -}}
{{- include "gpuaudit.applyValues" (dict "root" $root "obj" $obj) }}
---
{{ toYaml $obj }}
{{- end -}}

{{/* The data of one configMapGenerator entry of the kustomization in dir. */}}
{{- define "gpuaudit.generated" -}}
{{- $root := .root -}}
{{- $dir := .dir -}}
{{- $data := dict -}}
{{- range $env := .gen.envs | default list -}}
{{- range $line := splitList "\n" ($root.Files.Get (printf "%s/%s" $dir $env)) -}}
{{- $line = trim $line -}}
{{- if and $line (not (hasPrefix "#" $line)) -}}
{{- $key := regexFind "^[^=]*" $line -}}
{{- $_ := set $data $key (trimPrefix (printf "%s=" $key) $line) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $literal := .gen.literals | default list -}}
{{- $key := regexFind "^[^=]*" $literal -}}
{{- $_ := set $data $key (trimPrefix (printf "%s=" $key) $literal) -}}
{{- end -}}
{{- range $file := .gen.files | default list -}}
{{- $key := base $file -}}
{{- $path := $file -}}
{{- if contains "=" $file -}}
{{- $key = regexFind "^[^=]*" $file -}}
{{- $path = trimPrefix (printf "%s=" $key) $file -}}
{{- end -}}
{{- $_ := set $data $key ($root.Files.Get (printf "%s/%s" $dir $path)) -}}
{{- end -}}
{{- toJson $data -}}
{{- end -}}
