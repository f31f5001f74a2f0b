"""A billing budget that alerts as the stack's project spends."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from trainstack.stackmodel.schema import Budget


@dataclass(frozen=True)
class BillingBudgetArgs:
    project: str
    budget: Budget
    # The label every resource of the stack carries (key, value): the budget counts only the
    # stack's own spending, not the whole project's.
    stack_label: tuple[str, str]


class BillingBudget(pulumi.ComponentResource):
    def __init__(self, name: str, args: BillingBudgetArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:BillingBudget", name, None, opts)
        project, budget = args.project, args.budget
        project_number = gcp.organizations.get_project_output(project_id=project).number
        # The Budgets API bills its calls to a quota project; with a user's own credentials
        # it refuses requests that name none. This provider names the stack's project.
        provider = gcp.Provider(
            f"{name}-billing-provider",
            project=project,
            user_project_override=True,
            billing_project=project,
            opts=pulumi.ResourceOptions(parent=self),
        )
        dollars = int(budget.monthly_usd)
        cents_as_nanos = round((budget.monthly_usd - dollars) * 1e9)
        self.budget = gcp.billing.Budget(
            f"{name}-budget",
            billing_account=budget.billing_account,
            display_name=f"trainstack {name}",
            amount=gcp.billing.BudgetAmountArgs(
                # No currency_code: the budget then takes the billing account's own currency;
                # naming USD fails for an account billed in another (Budgets API, BudgetAmount).
                specified_amount=gcp.billing.BudgetAmountSpecifiedAmountArgs(units=str(dollars), nanos=cents_as_nanos)
            ),
            threshold_rules=[gcp.billing.BudgetThresholdRuleArgs(threshold_percent=t) for t in budget.thresholds],
            # The Budgets API takes one label pair
            # (https://cloud.google.com/billing/docs/reference/budget/rest/v1/billingAccounts.budgets#Filter).
            budget_filter=gcp.billing.BudgetBudgetFilterArgs(
                projects=[project_number.apply(lambda n: f"projects/{n}")],
                labels={args.stack_label[0]: args.stack_label[1]},
            ),
            opts=pulumi.ResourceOptions(parent=self, provider=provider),
        )
        self.register_outputs({"monthly_usd": budget.monthly_usd})
