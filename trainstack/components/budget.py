"""A billing budget that alerts as the stack's project spends."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from trainstack.config import Budget


class BillingBudget(pulumi.ComponentResource):
    def __init__(self, name: str, project: str, budget: Budget, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:BillingBudget", name, None, opts)
        project_number = gcp.organizations.get_project_output(project_id=project).number
        self.budget = gcp.billing.Budget(
            f"{name}-budget",
            billing_account=budget.billing_account,
            display_name=f"trainstack {name}",
            amount=gcp.billing.BudgetAmountArgs(
                specified_amount=gcp.billing.BudgetAmountSpecifiedAmountArgs(currency_code="USD", units=str(int(budget.monthly_usd)))
            ),
            threshold_rules=[gcp.billing.BudgetThresholdRuleArgs(threshold_percent=t) for t in budget.thresholds],
            budget_filter=gcp.billing.BudgetBudgetFilterArgs(projects=[project_number.apply(lambda n: f"projects/{n}")]),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"monthly_usd": budget.monthly_usd})
