"""The contracts backends implement, one module per component kind.

These modules import no torch at module level (tensors appear in annotations only), so a spec or a
listing can reference them without cost.
"""
