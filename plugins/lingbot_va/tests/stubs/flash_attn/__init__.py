"""Test stub: LingBot-VA's ``wan_va/modules/model.py`` (6f092cb) imports ``flash_attn_func``
unconditionally, and uses it only when the transformer's config says ``attn_mode:
"flashattn"``. The test weights say ``"torch"`` (SDPA), so this is never called; a CPU has no
flash-attn to install."""


def flash_attn_func(*args, **kwargs):
    raise NotImplementedError("flash_attn stub (tests): set attn_mode 'torch' in transformer/config.json")
