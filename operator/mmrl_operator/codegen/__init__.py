"""Generated files: the CRD from the pydantic models, the chart's RBAC and admission policies from code."""
