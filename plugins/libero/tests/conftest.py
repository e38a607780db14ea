"""Fixtures shared by the wam-libero tests: a registry with the platform and the scripted model."""

from __future__ import annotations

import pytest

from wamcore.registry import Registry
from wamcore.service import LocalModel, ModelService
from wamcore.specs import ModelConfig

import wam_libero.plugin
import wam_libero.scripted


@pytest.fixture
def libero_registry():
    registry = Registry(entry_points=False)
    registry.register(wam_libero.plugin, name="libero")
    registry.register(wam_libero.scripted, name="libero-smoke")
    return registry


@pytest.fixture
def scripted_client():
    """``scripted_client(env, chunk=4, action=None)`` -> an in-process client bound to the env."""

    def make(env, chunk=4, action=None):
        options = {"chunk": chunk} if action is None else {"chunk": chunk, "action": action}
        service = ModelService(wam_libero.scripted.SCRIPTED_MODEL, ModelConfig(platform="libero", options=options))
        return LocalModel(service).bind(wam_libero.plugin.LIBERO_PLATFORM, env.observation_spec)

    return make
