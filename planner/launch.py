"""placeholder"""
def is_engine_flag(name: str) -> bool:
    return False
