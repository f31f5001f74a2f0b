"""A stack checked whole: the catalog's fit (trainstack.stackmodel.catalog_fit), the job's code
(trainstack.stackmodel.job_checks) and the stack's own rules of trust (access, network, keys),
every problem in one pass; and the entry points that parse a stack's config map and check it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainstack.base.errors import Problem, StackConfigError
from trainstack.catalog import Catalog, load_catalog
from trainstack.jobcode.package import (
    CodeError,
    as_installed,
)
from trainstack.stackmodel.catalog_fit import check_catalog_fit
from trainstack.stackmodel.configmap import parse_stack_config
from trainstack.stackmodel.derived import CheckedFacts, requirement_constraints
from trainstack.stackmodel.job_checks import check_job_code
from trainstack.stackmodel.naming import NAMESPACE, NOTEBOOK_ACCOUNT_SUFFIX, TPU_ACCOUNT_SUFFIX, TRAINING_ACCOUNT_SUFFIX
from trainstack.stackmodel.schema import (
    StackConfig,
)

# Compute Engine's default service account: PROJECT_NUMBER-compute@developer.gserviceaccount.com.
DEFAULT_COMPUTE_ACCOUNT_SUFFIX = "-compute@developer.gserviceaccount.com"


def check_access(cfg: StackConfig) -> list[Problem]:
    """trainstack:access names teammates, never an account a machine runs as: a machine that
    could queue jobs could run code on every other one (`check`'s policy refuses it too)."""
    if cfg.settings.access is None:
        return []
    machines = {
        f"{cfg.name}-{suffix}@{cfg.project}.iam.gserviceaccount.com"
        for suffix in (TRAINING_ACCOUNT_SUFFIX, TPU_ACCOUNT_SUFFIX, NOTEBOOK_ACCOUNT_SUFFIX)
    }
    problems = []
    for member in cfg.settings.access.members:
        email = member.split(":", 1)[-1]
        if email in machines or email.endswith(DEFAULT_COMPUTE_ACCOUNT_SUFFIX):
            problems.append(
                Problem(
                    f"{NAMESPACE}:access.members",
                    f"{member} is an account the stack's machines run as: a machine that could queue jobs could run "
                    "code on every other one; name the teammates (user:, group: or their own serviceAccount:)",
                )
            )
    return problems


def check_network(cfg: StackConfig) -> list[Problem]:
    """A network to join is in the stack's region: a machine goes on a subnetwork of its own region."""
    network = cfg.settings.network
    if network is None or network.region == cfg.region:
        return []
    return [
        Problem(
            f"{NAMESPACE}:network.subnetwork",
            f"{network.subnetwork} is in {network.region}, not in gcp:region {cfg.region}: the machines go on a "
            f"subnetwork of their own region (one of {network.host_project}'s in {cfg.region})",
        )
    ]


def check_encryption(cfg: StackConfig) -> list[Problem]:
    """A customer-managed key is in the stack's region: the bucket (a regional bucket), the
    registry and the disks are there, and Cloud Storage and Artifact Registry take a key of
    their resource's own location only; no `global` or multi-region key serves all three."""
    encryption = cfg.settings.encryption
    if encryption is None or encryption.location == cfg.region:
        return []
    where = "global" if encryption.location == "global" else f"location {encryption.location}"
    return [
        Problem(
            f"{NAMESPACE}:encryption.kms_key",
            f"the key is in {where}, not in gcp:region {cfg.region}: the bucket and the registry take a key of "
            f"their own region only; use a key ring in {cfg.region} (projects/P/locations/{cfg.region}/keyRings/...)",
        )
    ]


def check_stack(cfg: StackConfig, catalog: Catalog | None = None) -> list[Problem]:
    return check_and_derive(cfg, catalog)[0]


def check_and_derive(cfg: StackConfig, catalog: Catalog | None = None) -> tuple[list[Problem], CheckedFacts]:
    """Every problem of ``cfg`` against the catalog, and the facts derived while checking."""
    catalog = catalog or load_catalog()
    fit = check_catalog_fit(cfg, catalog)
    if not fit.placed:
        return fit.problems, CheckedFacts()
    job = check_job_code(cfg, catalog)
    problems = fit.problems + job.problems + check_access(cfg) + check_network(cfg) + check_encryption(cfg)
    requirements = job.requirements
    if requirements is not None and not problems:
        # Last, once the stack is otherwise sound: locking may reach a package index.
        try:
            requirements = as_installed(requirements, requirement_constraints(cfg, catalog))
        except CodeError as error:
            problems.append(Problem(f"{NAMESPACE}:job.requirements", str(error)))
    return problems, CheckedFacts(job.package, requirements, job.wheelhouse, fit.strategy)


def validate_and_derive(cfg: StackConfig, catalog: Catalog | None = None) -> tuple[StackConfig, CheckedFacts]:
    """``cfg`` and what its checks derived, when it fits the catalog; else raise with every problem found."""
    problems, facts = check_and_derive(cfg, catalog)
    if problems:
        raise StackConfigError(problems)
    return cfg, facts


def parse_and_check(
    stack: str, config: Mapping[str, Any], catalog: Catalog | None = None, secret_keys: frozenset[str] = frozenset()
) -> StackConfig:
    """:func:`parse_check_and_derive` without the derived facts."""
    return parse_check_and_derive(stack, config, catalog, secret_keys)[0]


def parse_check_and_derive(
    stack: str, config: Mapping[str, Any], catalog: Catalog | None = None, secret_keys: frozenset[str] = frozenset()
) -> tuple[StackConfig, CheckedFacts]:
    """Parse a stack's config map and check it against the catalog, reporting every problem
    in one pass: a section that fails to parse (a bad job name, say) is left out and the
    catalog's rules still check the others (the cluster's GPUs)."""
    try:
        cfg = parse_stack_config(stack, config, secret_keys)
    except StackConfigError as error:
        if error.partial is None:
            raise
        more = [
            p
            for p in check_stack(error.partial, catalog)
            if not any(
                p.key == section or p.key.startswith((f"{section}.", f"{section}[")) for section in error.dropped
            )
        ]
        raise StackConfigError([*error.problems, *more]) from None
    return validate_and_derive(cfg, catalog)
