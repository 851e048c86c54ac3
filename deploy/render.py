#!/usr/bin/env python3
"""Renders a Kustomize directory without kustomize (which Debian does not
package): the subset of kustomization.yaml these manifests use, with
Kustomize's meaning, so that `kubectl kustomize DIR` gives the same objects.

    deploy/render.py deploy/overlays/cpu > trainyard.yaml

Supported fields: resources (files, and directories with a
kustomization.yaml), namespace, labels (pairs; includeSelectors,
includeTemplates), images (name -> newName/newTag) and patches (strategic
merge patches by path: maps merge, lists of maps with a `name` merge by
name, other lists are replaced). Anything else is an error, not ignored.
"""
import copy
import os
import sys

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "labels", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass",
                  "CustomResourceDefinition", "PriorityClass"}
TEMPLATED = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}


class RenderError(Exception):
    pass


def merge(base, patch):
    """Strategic merge (the subset described above)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and patch
            and all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = [copy.deepcopy(x) for x in base]
        index = {x["name"]: i for i, x in enumerate(out)}
        for item in patch:
            if item["name"] in index:
                out[index[item["name"]]] = merge(out[index[item["name"]]], item)
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def load_yaml_docs(path):
    with open(path) as f:
        try:
            return [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            raise RenderError(f"{path}: {e}") from e


def containers(obj):
    spec = obj.get("spec", {})
    pod = spec.get("template", {}).get("spec", {}) if obj["kind"] in TEMPLATED else spec
    if obj["kind"] == "Pod":
        pod = spec
    return pod.get("containers", []) + pod.get("initContainers", [])


def render(directory):
    path = os.path.join(directory, "kustomization.yaml")
    if not os.path.isfile(path):
        raise RenderError(f"{directory}: no kustomization.yaml")
    docs = load_yaml_docs(path)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise RenderError(f"{path}: expected one mapping")
    k = docs[0]
    unknown = set(k) - SUPPORTED
    if unknown:
        raise RenderError(f"{path}: fields {sorted(unknown)} are not supported by this renderer "
                          f"(supported: {sorted(SUPPORTED)}); use kustomize")
    objects = []
    for resource in k.get("resources", []):
        full = os.path.normpath(os.path.join(directory, resource))
        if os.path.isdir(full):
            objects += render(full)
        elif os.path.isfile(full):
            for d in load_yaml_docs(full):
                if not isinstance(d, dict) or "kind" not in d or "metadata" not in d:
                    raise RenderError(f"{full}: a document without kind or metadata")
                objects.append(d)
        else:
            raise RenderError(f"{path}: resource {resource!r} does not exist")

    for patch in k.get("patches", []):
        if set(patch) - {"path"}:
            raise RenderError(f"{path}: patches: only `path` is supported, got {sorted(patch)}")
        patch_path = os.path.join(directory, patch["path"])
        for p in load_yaml_docs(patch_path):
            matches = [i for i, o in enumerate(objects)
                       if o["kind"] == p.get("kind") and o["metadata"].get("name") == p.get("metadata", {}).get("name")]
            if len(matches) != 1:
                raise RenderError(f"{patch_path}: patches {p.get('kind')}/{p.get('metadata', {}).get('name')}, "
                                  f"which matches {len(matches)} objects")
            objects[matches[0]] = merge(objects[matches[0]], p)

    namespace = k.get("namespace")
    if namespace:
        for o in objects:
            if o["kind"] == "Namespace":
                o["metadata"]["name"] = namespace
            elif o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = namespace

    for entry in k.get("labels", []):
        pairs = entry.get("pairs", {})
        for o in objects:
            o["metadata"].setdefault("labels", {}).update(pairs)
            if entry.get("includeTemplates") and o["kind"] in TEMPLATED:
                o["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
            if entry.get("includeSelectors"):
                raise RenderError(f"{path}: labels.includeSelectors is not supported; use kustomize")

    for image in k.get("images", []):
        for o in objects:
            for c in containers(o):
                name = c.get("image", "")
                bare = name.split("@")[0].rsplit(":", 1)[0] if ":" in name.split("/")[-1] else name
                if bare == image["name"]:
                    c["image"] = image.get("newName", image["name"]) + ":" + str(image.get("newTag", "latest"))
    return objects


def main():
    if len(sys.argv) != 2:
        print("usage: render.py KUSTOMIZATION_DIR", file=sys.stderr)
        return 2
    try:
        objects = render(sys.argv[1])
    except RenderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
