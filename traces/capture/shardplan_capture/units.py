"""FSDP unit patterns: matching module names as shardplan does, the default units
(the blocks of the largest repeated list), and how many modules they select."""

from __future__ import annotations

from torch import nn


def pattern_matches(pattern, name):
    """module_name_matches from models/module_pattern.cc: '*' within a segment, '**' across."""
    if not pattern:
        return not name
    if pattern.startswith("**"):
        return any(pattern_matches(pattern[2:], name[i:]) for i in range(len(name) + 1))
    if pattern[0] == "*":
        for i in range(len(name) + 1):
            if pattern_matches(pattern[1:], name[i:]):
                return True
            if i < len(name) and name[i] == ".":
                break
        return False
    return bool(name) and pattern[0] == name[0] and pattern_matches(pattern[1:], name[1:])


def default_units(model):
    """Children of the largest ModuleList/Sequential of repeated blocks, as 'fqn.*': one
    whose children of a single class (two or more) hold most of its parameters."""
    best, best_size = None, 0
    for fqn, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        by_type = {}
        for child in module.children():
            count, size = by_type.get(type(child), (0, 0))
            by_type[type(child)] = (count + 1, size + sum(p.numel() for p in child.parameters()))
        total = sum(p.numel() for p in module.parameters())
        repeated = max((size for count, size in by_type.values() if count >= 2), default=0)
        if total > best_size and repeated > 0 and 2 * repeated >= total:
            best, best_size = fqn, total
    if best is None:
        return []
    return [f"{best}.*" if best else "*"]


def count_units(tree_fqns_in_order, patterns):
    """Outermost modules matching a pattern, as match_modules counts them."""
    matched = []
    for fqn in tree_fqns_in_order:
        if fqn and any(pattern_matches(p, fqn) for p in patterns) and not any(
                fqn.startswith(m + ".") for m in matched):
            matched.append(fqn)
    return len(matched)
