"""The five-resource vector of a step, its pricing on hardware, and the two floors."""

from planner.resources.vector import RESOURCES, TIMED_RESOURCES, Pricing, ResourceTimes, price

__all__ = ["RESOURCES", "TIMED_RESOURCES", "Pricing", "ResourceTimes", "price"]
