"""Dollars: what each request spent upstream and what the gateway saved it, per tenant, route, model and layer.

prices.py (USD per million tokens: policy `models:` over the built-in table), ledger.py (one request's
figures), store.py (per-hour totals in Redis), budget.py (per-tenant daily and monthly budgets),
accounting.py (the one object the handlers call).
"""
