#!/usr/bin/python3
"""Schema check of deploy/kubernetes/*.yaml, against the Kubernetes API's own
types as Debian's python3-kubernetes carries them (generated from the API's
OpenAPI schema, 1.22 here), then the cross-references between the manifests
and the flags the dslaunch tools accept.

Usage: check_kubernetes_manifests.py MANIFEST_DIR BIN_DIR

Every document is checked field by field:
  - its apiVersion and kind are a known type;
  - every key is a field of its type (a misspelled or misplaced key fails,
    where `kubectl apply` would drop it or the API server refuse it);
  - every value has the field's type (str, int, bool, list, map, object);
  - every required field is present (the generated setters refuse None).
Then:
  - every secret and claim a pod mounts is defined by the manifests;
  - the Job's --agents names each replica of the agents' StatefulSet through
    its headless Service and port;
  - every --flag in a container's args is a flag of that binary (its --help).
"""
import glob
import inspect
import os
import re
import subprocess
import sys

import kubernetes.client as k8s
import yaml

KINDS = {
    ("v1", "Secret"): k8s.V1Secret,
    ("v1", "Service"): k8s.V1Service,
    ("v1", "PersistentVolumeClaim"): k8s.V1PersistentVolumeClaim,
    ("apps/v1", "StatefulSet"): k8s.V1StatefulSet,
    ("apps/v1", "DaemonSet"): k8s.V1DaemonSet,
    ("batch/v1", "Job"): k8s.V1Job,
}

_required_cache = {}


def required_fields(cls):
    """The attributes whose generated setter refuses None."""
    if cls not in _required_cache:
        required = set()
        for attribute in cls.openapi_types:
            setter = getattr(cls, attribute).fset
            if "must not be `None`" in inspect.getsource(setter):
                required.add(attribute)
        _required_cache[cls] = required
    return _required_cache[cls]


def check(value, type_name, path, errors):
    if type_name == "object":
        return  # any value (int-or-string, free-form)
    scalar = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str, "date": str}
    if type_name in scalar:
        ok = isinstance(value, scalar[type_name]) and not (type_name in ("int", "float") and isinstance(value, bool))
        if not ok:
            errors.append(f"{path}: expected {type_name}, found {type(value).__name__} {value!r}")
        return
    match = re.fullmatch(r"list\[(.+)\]", type_name)
    if match:
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list of {match.group(1)}")
            return
        for i, item in enumerate(value):
            check(item, match.group(1), f"{path}[{i}]", errors)
        return
    match = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if match:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map of {match.group(1)}")
            return
        for key, item in value.items():
            if not isinstance(key, str):
                errors.append(f"{path}: key {key!r} is not a string")
            check(item, match.group(1), f"{path}.{key}", errors)
        return
    cls = getattr(k8s, type_name, None)
    if cls is None:
        errors.append(f"{path}: unknown type {type_name}")
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a {type_name} object, found {type(value).__name__}")
        return
    by_json_name = {json: attr for attr, json in cls.attribute_map.items()}
    for key, item in value.items():
        if key not in by_json_name:
            errors.append(f"{path}: unknown field '{key}' of {type_name} "
                          f"(known: {', '.join(sorted(by_json_name))})")
            continue
        check(item, cls.openapi_types[by_json_name[key]], f"{path}.{key}", errors)
    for attribute in required_fields(cls):
        if cls.attribute_map[attribute] not in value:
            errors.append(f"{path}: {type_name} needs '{cls.attribute_map[attribute]}'")


def pod_specs(document):
    kind = document["kind"]
    if kind in ("StatefulSet", "DaemonSet", "Job"):
        yield document["spec"]["template"]["spec"]


def flags_of(binary):
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    return set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9_]+)", help_text, re.M))


def report(errors):
    for error in errors:
        print(f"check_kubernetes_manifests: {error}", file=sys.stderr)
    if errors:
        sys.exit(1)


def main():
    manifest_dir, bin_dir = sys.argv[1], sys.argv[2]
    errors = []
    documents = []
    files = sorted(glob.glob(os.path.join(manifest_dir, "*.yaml")))
    if not files:
        errors.append(f"no manifests in {manifest_dir}")
    for path in files:
        with open(path) as f:
            for index, document in enumerate(yaml.safe_load_all(f)):
                if document is None:
                    continue
                where = f"{os.path.basename(path)}#{index}"
                key = (document.get("apiVersion"), document.get("kind"))
                if key not in KINDS:
                    errors.append(f"{where}: unknown apiVersion/kind {key}")
                    continue
                check(document, KINDS[key].__name__, f"{where} {key[1]}", errors)
                documents.append((where, document))

    if errors:
        report(errors)  # the references below assume well-typed documents
    by_kind = {}
    for where, document in documents:
        by_kind.setdefault(document["kind"], {})[document["metadata"]["name"]] = document
    for where, document in documents:
        for spec in pod_specs(document):
            for volume in spec.get("volumes", []):
                if "secret" in volume and volume["secret"]["secretName"] not in by_kind.get("Secret", {}):
                    errors.append(f"{where}: secret {volume['secret']['secretName']} is not defined")
                claim = volume.get("persistentVolumeClaim", {}).get("claimName")
                if claim and claim not in by_kind.get("PersistentVolumeClaim", {}):
                    errors.append(f"{where}: claim {claim} is not defined")
            for container in spec["containers"]:
                binary = os.path.join(bin_dir, os.path.basename(container["command"][0]))
                known = flags_of(binary)
                if not known:
                    errors.append(f"{where}: {binary} --help listed no flags")
                for arg in container.get("args", []):
                    flag = arg.split("=", 1)[0]
                    if flag.startswith("--") and flag not in known:
                        errors.append(f"{where}: {os.path.basename(binary)} has no flag {flag}")

    for name, job in by_kind.get("Job", {}).items():
        args = job["spec"]["template"]["spec"]["containers"][0].get("args", [])
        agents = [a.split("=", 1)[1] for a in args if a.startswith("--agents=")]
        if not agents:
            continue
        for set_name, stateful in by_kind.get("StatefulSet", {}).items():
            service = stateful["spec"]["serviceName"]
            if service not in by_kind.get("Service", {}):
                errors.append(f"StatefulSet {set_name}: its service {service} is not defined")
                continue
            if by_kind["Service"][service]["spec"].get("clusterIP") != "None":
                errors.append(f"Service {service}: not headless (clusterIP: None), so no name per agent")
            agent_args = stateful["spec"]["template"]["spec"]["containers"][0]["args"]
            listen = [a.split("=", 1)[1] for a in agent_args if a.startswith("--listen=")]
            port = listen[0].rsplit(":", 1)[1] if listen else "?"
            expected = ",".join(f"{set_name}-{i}.{service}:{port}" for i in range(stateful["spec"]["replicas"]))
            if agents[0] != expected:
                errors.append(f"Job {name}: --agents={agents[0]}, but the StatefulSet {set_name} serves {expected}")

    report(errors)
    print(f"check_kubernetes_manifests: {len(documents)} documents in {len(files)} files match the Kubernetes "
          f"API types; references and flags agree")


if __name__ == "__main__":
    main()
