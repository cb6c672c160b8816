"""Search: a perfcast model steering TVM meta-schedule's evolutionary search (`perfcast tune --cost-model perfcast`)."""

from .cost_model import COST_MODELS, OnlineCorrection, SearchStats, perfcast_cost_model, search_cost_model

__all__ = ["perfcast_cost_model", "search_cost_model", "SearchStats", "OnlineCorrection", "COST_MODELS"]
