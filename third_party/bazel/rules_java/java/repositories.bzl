"""Offline stand-in: no remote JDKs are fetched."""

def rules_java_dependencies():
    pass

def rules_java_toolchains():
    pass
